#include "transports/plugin_host.h"

#include <dirent.h>
#include <dlfcn.h>
#include <link.h>

#include <algorithm>
#include <bit>
#include <climits>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <set>

#include "lib/base/env.h"
#include "lib/base/error.h"
#include "lib/base/log.h"
#include "lib/base/ops.h"
#include "lib/base/socket.h"
#include "lib/base/text.h"
#include "transports/plugin.h"
#include "transports/plugin_memory.h"

// Set by meson: the build tree's root and where it puts plugins, the plugins this source tree has and those
// this build made.
#ifndef CHORUS_BUILD_ROOT
#define CHORUS_BUILD_ROOT ""
#endif
#ifndef CHORUS_SHIPPED_PLUGINS
#define CHORUS_SHIPPED_PLUGINS ""
#endif
#ifndef CHORUS_BUILT_PLUGINS
#define CHORUS_BUILT_PLUGINS ""
#endif
#ifndef CHORUS_BUILD_PLUGIN_DIRS
#define CHORUS_BUILD_PLUGIN_DIRS ""
#endif

namespace chorus::transport {

namespace {

static_assert(sizeof(Request) == sizeof(chorusPluginRequest_v4) &&
              offsetof(Request, done) == offsetof(chorusPluginRequest_v4, done) &&
              offsetof(Request, optional) == offsetof(chorusPluginRequest_v4, optional) &&
              offsetof(Request, pendingParts) == offsetof(chorusPluginRequest_v4, priv) && sizeof(bool) == 1);
static_assert(sizeof(EnvSpec) == sizeof(chorusPluginEnv_v4));

int64_t ns(Deadline d) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(d.time_since_epoch()).count();
}

static_assert(sizeof(OpTag) == sizeof(chorusPluginTag_v4) && offsetof(OpTag, seq) == offsetof(chorusPluginTag_v4, seq) &&
              offsetof(OpTag, count) == offsetof(chorusPluginTag_v4, count) &&
              offsetof(OpTag, root) == offsetof(chorusPluginTag_v4, root) &&
              offsetof(OpTag, kind) == offsetof(chorusPluginTag_v4, kind) &&
              offsetof(OpTag, dtype) == offsetof(chorusPluginTag_v4, dtype) &&
              offsetof(OpTag, redop) == offsetof(chorusPluginTag_v4, redop) &&
              offsetof(OpTag, pad) == offsetof(chorusPluginTag_v4, pad));
// The same bytes: one copy, not a field-by-field conversion on every message.
chorusPluginTag_v4 cTag(const OpTag& t) { return std::bit_cast<chorusPluginTag_v4>(t); }

chorusPluginRequest_v4* cReq(Request* r) { return reinterpret_cast<chorusPluginRequest_v4*>(r); }

// A transport that lives in a plugin: every call goes through the table; a failure comes back as a code and
// the plugin's text, and is thrown here as chorus::Error.
class PluginTransport final : public Transport {
 public:
  PluginTransport(const chorusTransportPlugin_v4_t* table, const Setup& setup) : p_(table), setup_(setup) {
    c_.rank = setup.rank;
    c_.nranks = setup.nranks;
    c_.secret = setup.secret;
    c_.commId = setup.commId;
    c_.socketIfname = setup.socketIfname.c_str();
    c_.peers = nullptr;
    char err[1024] = {};
    int rc = p_->create(&c_, &t_, err, sizeof err);
    if (rc != 0 || t_ == nullptr)
      throw Error(rc != 0 ? static_cast<chorusResult_t>(rc) : chorusInternalError,
                  fmt::format("rank {}: transport {} could not start: {}", setup.rank, p_->name, err));
  }
  ~PluginTransport() override { p_->destroy(t_); }

  const char* name() const override { return p_->name; }

  std::vector<uint8_t> address() const override {
    const uint8_t* bytes = nullptr;
    size_t len = 0;
    check(p_->address(t_, &bytes, &len));
    if (len > kMaxAddressBytes)
      fail(chorusInternalError, "rank {}: transport {} published an address of {} bytes (at most {})", setup_.rank,
           p_->name, len, kMaxAddressBytes);
    return {bytes, bytes + len};
  }

  void connect(int peer, const std::vector<uint8_t>& address, Deadline deadline) override {
    fillPeers();
    check(p_->connect(t_, peer, address.data(), address.size(), ns(deadline)));
  }
  void accept(int peer, const std::vector<uint8_t>& address, Deadline deadline) override {
    fillPeers();
    check(p_->accept(t_, peer, address.data(), address.size(), ns(deadline)));
  }
  void settle(Deadline deadline) override {
    if (p_->settle != nullptr) check(p_->settle(t_, ns(deadline)));
  }
  void isend(int peer, const void* buf, size_t len, const OpTag& tag, Request* req) override {
    chorusPluginTag_v4 t = cTag(tag);
    check(p_->isend(t_, peer, buf, len, &t, cReq(req)));
  }
  void irecv(int peer, void* buf, size_t len, const OpTag& tag, Request* req) override {
    chorusPluginTag_v4 t = cTag(tag);
    check(p_->irecv(t_, peer, buf, len, &t, cReq(req)));
  }
  bool irecvReduce(int peer, void* dst, const void* src, size_t len, chorusDataType_t dtype, chorusRedOp_t op,
                   const OpTag& tag, Request* req) override {
    if (p_->irecvReduce == nullptr) return false;
    chorusPluginTag_v4 t = cTag(tag);
    int posted = 0;
    check(p_->irecvReduce(t_, peer, dst, src, len, dtype, op, &t, cReq(req), &posted));
    return posted != 0;
  }
  bool progress() override {
    int moved = 0;
    check(p_->progress(t_, &moved));
    return moved != 0;
  }
  int waitFd() const override { return p_->waitFd(t_); }
  bool armWake() override {
    int maySleep = 0;
    check(p_->armWake(t_, &maySleep));
    return maySleep != 0;
  }
  void sendAbort(chorusResult_t code, const std::string& text, Deadline deadline) override {
    p_->sendAbort(t_, code, text.c_str(), ns(deadline));
  }
  void close(Deadline deadline) override { p_->close(t_, ns(deadline)); }

 private:
  void check(int rc) const {
    if (rc == 0) return;
    const char* why = p_->lastError(t_);
    throw Error(static_cast<chorusResult_t>(rc), why != nullptr && *why ? why
                                                     : fmt::format("transport {} failed (code {})", p_->name, rc));
  }
  void fillPeers() {
    if (c_.peers != nullptr) return;
    for (const PeerInfo& p : setup_.peers) peers_.push_back({p.rank, p.pid, p.host.c_str(), p.hostId.c_str()});
    c_.peers = peers_.data();
  }

  const chorusTransportPlugin_v4_t* p_;
  const Setup& setup_;
  chorusPluginSetup_v4 c_{};
  std::vector<chorusPluginPeer_v4> peers_;
  void* t_ = nullptr;
};

// The non-empty entries of a separated list.
std::vector<std::string> splitList(const std::string& s, char sep) {
  std::vector<std::string> out;
  for (std::string& part : split(s, sep))
    if (!part.empty()) out.push_back(std::move(part));
  return out;
}

std::string dirOf(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

// "ucx" for ".../libchorus-ucx.so"; "" when the file is not named like a plugin.
std::string pluginName(const std::string& file) {
  const std::string prefix = "libchorus-", suffix = ".so";
  if (file.size() <= prefix.size() + suffix.size() || file.compare(0, prefix.size(), prefix) != 0 ||
      file.compare(file.size() - suffix.size(), suffix.size(), suffix) != 0)
    return "";
  return file.substr(prefix.size(), file.size() - prefix.size() - suffix.size());
}

// "" when the traits' chunk steps keep plugin.h's rules, else the first rule they break.
std::string chunkStepsProblem(const chorusPluginTraits_v4& t) {
  if (t.nchunks < 1 || t.nchunks > CHORUS_PLUGIN_MAX_CHUNK_STEPS)
    return fmt::format("{} steps (1..{} allowed)", t.nchunks, CHORUS_PLUGIN_MAX_CHUNK_STEPS);
  if (t.chunks[0].fromBytes != 0) return fmt::format("the first starts at {} bytes, not 0", t.chunks[0].fromBytes);
  for (uint32_t i = 0; i < t.nchunks; ++i) {
    const chorusPluginChunkStep_v4& s = t.chunks[i];
    if (s.chunkBytes < kMinChunkBytes || s.chunkBytes > kMaxChunkBytes)
      return fmt::format("step {} has a chunk of {} bytes (4 KiB..64 MiB allowed)", i, s.chunkBytes);
    if (i > 0 && s.fromBytes <= t.chunks[i - 1].fromBytes)
      return fmt::format("step {} starts at {} bytes, not after step {}", i, s.fromBytes, i - 1);
  }
  return "";
}

Descriptor descriptorOf(const chorusTransportPlugin_v4_t* t, const std::string& file) {
  Descriptor d;
  d.name = t->name;
  d.preference = t->preference;
  d.origin = file;
  d.env = std::span<const EnvSpec>(reinterpret_cast<const EnvSpec*>(t->env), t->nenv);
  d.traits = {t->traits.alphaUs, t->traits.gbps, t->traits.alphaUsOversubscribed, t->traits.gbpsOversubscribed,
              t->traits.reducesOnReceive != 0, {}};
  for (uint32_t i = 0; i < t->traits.nchunks; ++i)
    d.traits.chunks.push_back({t->traits.chunks[i].fromBytes, t->traits.chunks[i].chunkBytes});
  d.unavailable = [t] {
    const char* why = t->unavailable ? t->unavailable() : nullptr;
    return std::string(why ? why : "");
  };
  d.disabledByEnv = [t] { return t->disabledByEnv != nullptr && t->disabledByEnv() != 0; };
  d.canConnect = [t](const PeerInfo& a, const PeerInfo& b) {
    chorusPluginPeer_v4 ca{a.rank, a.pid, a.host.c_str(), a.hostId.c_str()};
    chorusPluginPeer_v4 cb{b.rank, b.pid, b.host.c_str(), b.hostId.c_str()};
    return t->canConnect(&ca, &cb) != 0;
  };
  d.create = [t](const Setup& setup) -> std::unique_ptr<Transport> {
    return std::make_unique<PluginTransport>(t, setup);
  };
  return d;
}

// The versions of a table a file exports other than `speaks`, for the message that refuses it.
std::string versionsIn(void* handle, const char* table, int speaks) {
  std::string found;
  for (int v = 0; v <= 16; ++v)
    if (v != speaks && dlsym(handle, fmt::format("{}_v{}", table, v).c_str()))
      found += (found.empty() ? "" : ", ") + std::to_string(v);
  return found;
}

// Loads one file: its transport (a Descriptor) and its device runtime (registered at once), either or both; false
// The size the shared object gives the symbol at `address` (its ELF st_size), or 0 where it does not say.
size_t symbolSize(const void* address) {
  Dl_info info{};
  void* entry = nullptr;  // the symbol's ElfW(Sym)
  if (dladdr1(address, &info, &entry, RTLD_DL_SYMENT) == 0 || entry == nullptr) return 0;
  const auto* sym = static_cast<const ElfW(Sym)*>(entry);
  return sym->st_size;
}

// "" when the table at `address` is at least `expected` bytes long (or the object does not say), else why not: a
// table built against another plugin.h would be read past its end.
std::string shortTable(const std::string& path, const char* symbol, const void* address, size_t expected) {
  const size_t size = symbolSize(address);
  if (size == 0 || size >= expected) return "";
  return fmt::format("{}: its {} is {} bytes, this libchorus's is {}: it was built against another plugin.h", path,
                     symbol, size, expected);
}

// with the reason when it has neither that this libchorus accepts. Loaded objects stay for the process's life.
bool loadOne(const std::string& path, std::optional<Descriptor>* out, std::string* memoryNote, std::string* why) {
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* e = dlerror();
    *why = fmt::format("{} could not be loaded: {}", path, e ? e : "unknown error");
    return false;
  }
  auto* table = static_cast<const chorusTransportPlugin_v4_t*>(dlsym(h, CHORUS_TRANSPORT_PLUGIN_SYMBOL));
  auto* memory = static_cast<const chorusMemoryPlugin_v4_t*>(dlsym(h, CHORUS_MEMORY_PLUGIN_SYMBOL));
  if (table == nullptr && memory == nullptr) {
    const std::string t = versionsIn(h, "chorusTransportPlugin", CHORUS_TRANSPORT_PLUGIN_VERSION);
    const std::string m = versionsIn(h, "chorusMemoryPlugin", CHORUS_MEMORY_PLUGIN_VERSION);
    if (!t.empty())
      *why = fmt::format("{} is a plugin of version {}; this libchorus speaks version {}", path, t,
                         CHORUS_TRANSPORT_PLUGIN_VERSION);
    else if (!m.empty())
      *why = fmt::format("{} is a memory plugin of version {}; this libchorus speaks version {}", path, m,
                         CHORUS_MEMORY_PLUGIN_VERSION);
    else
      *why = fmt::format("{} is not a Chorus transport plugin (it exports no {}) nor a memory plugin (no {})", path,
                         CHORUS_TRANSPORT_PLUGIN_SYMBOL, CHORUS_MEMORY_PLUGIN_SYMBOL);
    dlclose(h);
    return false;
  }
  // Everything is checked before anything is taken, so a refused file can be closed.
  std::string tooShort = memory ? shortTable(path, CHORUS_MEMORY_PLUGIN_SYMBOL, memory, sizeof *memory) : "";
  if (tooShort.empty() && table != nullptr)
    tooShort = shortTable(path, CHORUS_TRANSPORT_PLUGIN_SYMBOL, table, sizeof *table);
  if (!tooShort.empty()) {
    *why = tooShort;
    dlclose(h);
    return false;
  }
  if (memory != nullptr &&
      (memory->version != CHORUS_MEMORY_PLUGIN_VERSION || memory->name == nullptr || memory->classify == nullptr)) {
    *why = fmt::format("{} says it is a memory plugin of version {}; this libchorus speaks version {}", path,
                       memory->version, CHORUS_MEMORY_PLUGIN_VERSION);
    dlclose(h);
    return false;
  }
  if (table != nullptr &&
      (table->version != CHORUS_TRANSPORT_PLUGIN_VERSION || table->name == nullptr || table->create == nullptr)) {
    *why = fmt::format("{} says it is a plugin of version {}; this libchorus speaks version {}", path, table->version,
                       CHORUS_TRANSPORT_PLUGIN_VERSION);
    dlclose(h);
    return false;
  }
  if (std::string bad = table != nullptr ? chunkStepsProblem(table->traits) : ""; !bad.empty()) {
    *why = fmt::format("{} ({}) is refused: its pipeline chunk steps are invalid: {}", path, table->name, bad);
    dlclose(h);
    return false;
  }
  if (memory != nullptr) {
    std::string note = registerMemoryPlugin(memory, path);
    *memoryNote = fmt::format("device runtime {}: {}", memory->name, note.empty() ? "registered" : note);
  }
  if (table != nullptr) {
    *out = descriptorOf(table, path);
    if (auto describe = reinterpret_cast<chorusPluginDescribe_v1_t>(dlsym(h, CHORUS_PLUGIN_DESCRIBE_SYMBOL)))
      (*out)->describe = [describe] {
        const char* text = describe();
        return std::string(text != nullptr ? text : "");
      };
  }
  return true;
}

}  // namespace

std::vector<std::string> pluginSearchPath() {
  std::vector<std::string> dirs = splitList(envValue("CHORUS_PLUGIN_PATH"), ':');
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&pluginSearchPath), &info) != 0 && info.dli_fname != nullptr) {
    char real[PATH_MAX];
    std::string self = realpath(info.dli_fname, real) != nullptr ? real : info.dli_fname;
    dirs.push_back(dirOf(self));
    dirs.push_back(dirOf(self) + "/chorus");
    const std::string build = CHORUS_BUILD_ROOT;
    if (!build.empty() && self.compare(0, build.size() + 1, build + "/") == 0)
      for (const std::string& d : splitList(CHORUS_BUILD_PLUGIN_DIRS, ':')) dirs.push_back(d);
  }
  return dirs;
}

std::vector<Descriptor> loadPlugins(std::vector<Unavailable>* refused) {
  std::vector<Descriptor> loaded;
  std::set<std::string> seenFiles, names;
  const std::vector<std::string> path = pluginSearchPath();
  for (const std::string& dir : path) {
    DIR* d = opendir(dir.c_str());
    if (d == nullptr) continue;
    std::vector<std::string> files;
    while (dirent* e = readdir(d))
      if (!pluginName(e->d_name).empty()) files.push_back(e->d_name);
    closedir(d);
    std::sort(files.begin(), files.end());
    for (const std::string& f : files) {
      std::string full = dir + "/" + f;
      char real[PATH_MAX];
      std::string key = realpath(full.c_str(), real) != nullptr ? real : full;
      const std::string name = pluginName(f);
      if (!seenFiles.insert(key).second || names.count(name)) continue;  // the first of a name wins
      std::optional<Descriptor> desc;
      std::string memoryNote, why;
      if (loadOne(full, &desc, &memoryNote, &why)) {
        if (!memoryNote.empty()) CHORUS_INFO(kInit, "plugin {}: {}", full, memoryNote);
        names.insert(name);
        if (desc) {
          CHORUS_INFO(kInit, "transport plugin {} loaded from {}", desc->name, full);
          names.insert(desc->name);
          loaded.push_back(std::move(*desc));
        }
      } else {
        CHORUS_WARN(kInit, "transport plugin refused: {}", why);
        refused->push_back({.name = name, .why = why, .env = {}});
        names.insert(name);
      }
    }
  }
  std::string searched;
  for (const std::string& d : path) searched += (searched.empty() ? "" : ":") + d;
  const std::vector<std::string> built = splitList(CHORUS_BUILT_PLUGINS, ',');
  for (const std::string& name : splitList(CHORUS_SHIPPED_PLUGINS, ',')) {
    if (names.count(name)) continue;
    if (std::find(built.begin(), built.end(), name) == built.end())
      refused->push_back({.name = name,
                          .why = "not built into this Chorus (meson -D" + name +
                                 "=disabled, or its library was missing at build time)",
                          .env = {}});
    else
      refused->push_back(
          {.name = name,
           .why = fmt::format("plugin libchorus-{}.so not found (searched {})", name, searched),
           .env = {}});
  }
  return loaded;
}

}  // namespace chorus::transport
