#include "transports/ibverbs/hca_spec.h"

#include <algorithm>
#include <charconv>

#include "lib/base/error.h"
#include "lib/base/text.h"

namespace chorus::transport::ibverbs {

namespace {

[[noreturn]] void badSpec(const std::string& text, const std::string& why) {
  fail(chorusInvalidArgument, "environment variable CHORUS_IB_HCA='{}' is invalid: {}", text, why);
}

bool nameMatches(const HcaSpec& spec, const HcaEntry& e, const std::string& device) {
  return spec.exact ? device == e.name : device.starts_with(e.name);
}

std::string portState(const PortInfo& p) {
  if (p.active) return "active";
  return p.state.empty() ? "not active" : lower(p.state);
}

// "mlx5_0 (port 1 active, port 2 down), mlx5_1 (port 1 active)": devices in order of first appearance.
std::string describe(const std::vector<PortInfo>& all) {
  std::vector<std::string> devices;
  for (const PortInfo& p : all)
    if (std::find(devices.begin(), devices.end(), p.device) == devices.end()) devices.push_back(p.device);
  std::string out;
  for (const std::string& d : devices) {
    out += out.empty() ? d + " (" : "), " + d + " (";
    bool first = true;
    for (const PortInfo& p : all)
      if (p.device == d) {
        out += fmt::format("{}port {} {}", first ? "" : ", ", p.port, portState(p));
        first = false;
      }
  }
  return out + ")";
}

}  // namespace

HcaSpec parseHcaSpec(const std::string& text) {
  HcaSpec spec;
  spec.text = text;
  std::string rest = trim(text);
  if (rest.empty()) return spec;
  if (rest.front() == '^') {
    spec.exclude = true;
    rest = trim(rest.substr(1));
  }
  if (!rest.empty() && rest.front() == '=') {
    spec.exact = true;
    rest = trim(rest.substr(1));
  }
  if (rest.empty()) badSpec(text, "it lists no device");
  const std::vector<std::string> items = split(rest, ',');
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string& item = items[i];
    if (item.empty()) badSpec(text, fmt::format("entry {} is empty", i + 1));
    HcaEntry e;
    std::string body = trim(item);
    // A '^' before a later entry leaves that entry out ("mlx5,^mlx5_2"); a leading one excludes the whole list,
    // where one before an entry says nothing more.
    if (!body.empty() && body.front() == '^') {
      e.exclude = !spec.exclude;
      body = body.substr(1);
    }
    const size_t colon = body.find(':');
    e.name = trim(body.substr(0, colon));
    if (e.name.empty()) badSpec(text, fmt::format("entry '{}' has no device name", item));
    if (colon != std::string::npos) {
      const std::string port = trim(body.substr(colon + 1));
      const char* end = port.data() + port.size();
      auto [stop, err] = std::from_chars(port.data(), end, e.port);
      if (port.empty() || err != std::errc() || stop != end || e.port <= 0)
        badSpec(text, fmt::format("entry '{}' has port '{}', which is not a positive integer", item, port));
    }
    spec.entries.push_back(std::move(e));
  }
  return spec;
}

bool hcaSelects(const HcaSpec& spec, const std::string& device, int port) {
  if (spec.entries.empty()) return true;
  bool listed = false, anyIncluded = false, excluded = false;
  for (const HcaEntry& e : spec.entries) {
    const bool hit = nameMatches(spec, e, device) && (e.port == 0 || e.port == port);
    if (e.exclude) {
      excluded = excluded || hit;
    } else {
      anyIncluded = true;
      listed = listed || hit;
    }
  }
  if (spec.exclude) return !listed;
  return (listed || !anyIncluded) && !excluded;
}

std::vector<PortInfo> selectPorts(const HcaSpec& spec, const std::vector<PortInfo>& all) {
  if (all.empty()) fail(chorusSystemError, "no RDMA device");
  // A port asked for by number must be there and usable on every device the entry names: dropping it silently
  // would run the job on fewer rails than it was told to.
  if (!spec.exclude)
    for (const HcaEntry& e : spec.entries) {
      if (e.port == 0 || e.exclude) continue;
      for (const PortInfo& d : all) {
        if (!nameMatches(spec, e, d.device)) continue;
        auto p = std::find_if(all.begin(), all.end(),
                              [&](const PortInfo& q) { return q.device == d.device && q.port == e.port; });
        if (p == all.end())
          fail(chorusInvalidArgument, "environment variable CHORUS_IB_HCA='{}': {} has no port {}: the devices here "
               "are {}", spec.text, d.device, e.port, describe(all));
        if (!p->active)
          fail(chorusInvalidArgument, "environment variable CHORUS_IB_HCA='{}': port {} of {} is {}", spec.text,
               p->port, p->device, p->state.empty() ? "not active" : p->state);
      }
    }
  std::vector<PortInfo> chosen;
  bool selectsAny = false;
  for (const PortInfo& p : all) {
    if (!hcaSelects(spec, p.device, p.port)) continue;
    selectsAny = true;
    if (p.active) chosen.push_back(p);
  }
  if (!chosen.empty()) return chosen;
  if (spec.entries.empty()) fail(chorusSystemError, "no active RDMA port: the devices here are {}", describe(all));
  if (!selectsAny)
    fail(chorusInvalidArgument, "environment variable CHORUS_IB_HCA='{}' {}: the devices here are {}", spec.text,
         spec.exclude || std::all_of(spec.entries.begin(), spec.entries.end(),
                                     [](const HcaEntry& e) { return e.exclude; })
             ? "excludes every RDMA port"
             : "names no RDMA device",
         describe(all));
  fail(chorusSystemError, "no active RDMA port among those environment variable CHORUS_IB_HCA='{}' selects: the "
       "devices here are {}", spec.text, describe(all));
}

}  // namespace chorus::transport::ibverbs
