#include "transports/registry.h"

#include <algorithm>
#include <atomic>

#include "lib/base/error.h"
#include "lib/base/immortal.h"
#include "lib/base/log.h"
#include "lib/base/text.h"
#include "transports/plugin_host.h"
#include "transports/shm/shm_transport.h"
#include "transports/tcp/tcp_transport.h"

namespace chorus::transport {

namespace {

struct Registry {
  std::vector<Descriptor> usable;
  std::vector<Unavailable> refused;
};

Registry build(bool withPlugins) {
  Registry reg;
  std::vector<Descriptor> all{tcp::descriptor(), shm::descriptor()};
  if (withPlugins)
    for (Descriptor& d : loadPlugins(&reg.refused)) {
      if (std::any_of(all.begin(), all.end(), [&](const Descriptor& o) { return o.name == d.name; })) {
        reg.refused.push_back({.name = d.name,
                               .why = fmt::format("{} is a second transport named {} (the first is kept)", d.origin,
                                                  d.name),
                               .env = {}});
        continue;
      }
      all.push_back(std::move(d));
    }
  for (Descriptor& d : all) {
    std::string why = d.unavailable ? d.unavailable() : "";
    if (why.empty()) reg.usable.push_back(std::move(d));
    else reg.refused.push_back({.name = d.name, .why = why, .env = d.env});
  }
  std::stable_sort(reg.usable.begin(), reg.usable.end(),
                   [](const Descriptor& a, const Descriptor& b) { return a.preference < b.preference; });
  return reg;
}

// Note [Loading plugins on demand]: a plugin brings its library into the process (UCX starts threads, hooks
// memory and signals), so plugins are loaded only once something asks for a transport that is not built in:
// CHORUS_TRANSPORTS naming one, or any "^" list (all but ...), or chorus_info. Both registries live for the
// process; the built-in descriptors exist in each, so callers compare transports by name.
std::atomic<bool> gPluginsLoaded{false};
// Never destroyed (Note [Immortal statics]): a communicator may close its transports from an exit-time destructor.
const Registry& builtIns() {
  static const Immortal<Registry> r{build(false)};
  return *r;
}
const Registry& withPlugins() {
  static const Immortal<Registry> r{build(true)};
  return *r;
}
const Registry& theRegistry() { return gPluginsLoaded.load() ? withPlugins() : builtIns(); }

std::string knownNames() {
  std::string out;
  for (const Descriptor& d : registered()) out += (out.empty() ? "" : ", ") + d.name;
  return out.empty() ? "none" : out;
}

}  // namespace

void loadAllPlugins() {
  withPlugins();
  gPluginsLoaded = true;
}

const std::vector<Descriptor>& registered() { return theRegistry().usable; }
const std::vector<Unavailable>& unavailable() { return theRegistry().refused; }

const Descriptor* find(const std::string& name) {
  for (const Descriptor& d : registered())
    if (d.name == name) return &d;
  return nullptr;
}

// Note [CHORUS_TRANSPORTS]:
// NCCL's list grammar: "ucx" (only UCX), "shm,ucx" (those, in that order of preference), "^shm" (every
// available transport but shm, in default order), case-insensitive, blanks ignored. Empty: every available
// transport in default order, less those whose own settings say no (CHORUS_SHM_DISABLE=1 acts as "^shm"). A
// name that is unknown, or known but unavailable here (a plugin not found or refused), fails with the reason,
// since the user asked for it by name; excluding an unavailable one is fine.
std::vector<const Descriptor*> select(const std::string& spec) {
  std::string list = trim(spec);
  const bool exclude = !list.empty() && list[0] == '^';
  if (exclude) list = list.substr(1);
  std::vector<std::string> asked;
  for (const std::string& part : split(list, ','))
    if (!part.empty()) asked.push_back(lower(part));
  // A transport that is not built in, by name or by "all but", loads the plugins.
  const bool named = exclude || std::any_of(asked.begin(), asked.end(), [](const std::string& n) {
    return std::none_of(builtIns().usable.begin(), builtIns().usable.end(),
                        [&](const Descriptor& d) { return d.name == n; });
  });
  if (named) loadAllPlugins();
  std::vector<std::string> names;
  for (const std::string& n : asked) {
    if (find(n) == nullptr) {
      const auto u = std::find_if(unavailable().begin(), unavailable().end(),
                                  [&](const Unavailable& x) { return x.name == n; });
      if (u != unavailable().end()) {
        if (exclude) continue;  // excluding what is not here anyway is fine
        fail(chorusInvalidArgument, "CHORUS_TRANSPORTS='{}': transport {} is not available: {}", spec, n, u->why);
      }
      fail(chorusInvalidArgument, "CHORUS_TRANSPORTS='{}': unknown transport '{}' (available: {})", spec, n,
           knownNames());
    }
    if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  }
  std::vector<const Descriptor*> out;
  if (!exclude && !names.empty()) {
    for (const std::string& n : names) out.push_back(find(n));
    return out;
  }
  for (const Descriptor& d : registered()) {
    if (std::find(names.begin(), names.end(), d.name) != names.end()) continue;
    if (d.disabledByEnv && d.disabledByEnv()) continue;
    out.push_back(&d);
  }
  if (out.empty()) fail(chorusInvalidArgument, "CHORUS_TRANSPORTS='{}' leaves no transport (available: {})", spec,
                        knownNames());
  return out;
}

const Descriptor* choosePair(int a, int b, const std::vector<std::vector<std::string>>& offered,
                             const std::vector<PeerInfo>& peers) {
  const int lo = std::min(a, b), hi = std::max(a, b);
  const auto& theirs = offered[static_cast<size_t>(hi)];
  for (const std::string& name : offered[static_cast<size_t>(lo)]) {
    if (std::find(theirs.begin(), theirs.end(), name) == theirs.end()) continue;
    const Descriptor* d = find(name);
    if (d != nullptr && d->canConnect(peers[static_cast<size_t>(lo)], peers[static_cast<size_t>(hi)])) return d;
  }
  return nullptr;
}

}  // namespace chorus::transport
