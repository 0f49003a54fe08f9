// Which RDMA devices and ports the ibverbs transport uses: CHORUS_IB_HCA, read with NCCL_IB_HCA's grammar so that
// a job's NCCL settings carry over. Pure (no verbs calls): the transport lists the ports, this decides.
#pragma once

#include <string>
#include <vector>

namespace chorus::transport::ibverbs {

struct HcaEntry {
  std::string name;
  int port = 0;          // 0: every port
  bool exclude = false;  // a later entry written ^name: left out of what the others select
};

struct HcaSpec {
  bool exclude = false;  // '^': every port but those listed
  bool exact = false;    // '=': names match whole device names, not prefixes
  std::vector<HcaEntry> entries;  // empty: everything
  std::string text;               // as given, for messages
};

// text := ['^'] ['='] entry (',' entry)*; entry := name [':' port]; blanks around entries ignored. Without '=' a
// name selects every device whose name starts with it ("mlx5" selects mlx5_0 and mlx5_1), as NCCL does. Throws
// chorusInvalidArgument naming the variable and its value for an empty entry, an entry with no name, or a port
// that is not a positive integer.
HcaSpec parseHcaSpec(const std::string& text);

bool hcaSelects(const HcaSpec& spec, const std::string& device, int port);

struct PortInfo {
  std::string device;
  int port = 1;
  bool active = false;
  std::string state;      // "ACTIVE", "DOWN", ...
  std::string linkLayer;  // "InfiniBand" or "Ethernet"
};

// The active ports the spec selects, in the order of `all`. Throws chorusSystemError when there is no device, or
// when nothing selected is active; chorusInvalidArgument when the spec selects nothing present, or when an entry
// with a port (not excluded) names a port that a device its name matches lacks or has not active. Every message
// lists the devices and their ports' states.
std::vector<PortInfo> selectPorts(const HcaSpec& spec, const std::vector<PortInfo>& all);

}  // namespace chorus::transport::ibverbs
