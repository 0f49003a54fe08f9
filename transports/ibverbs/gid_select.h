// Which GID index a port's queue pairs use. RoCE addresses a peer by GID, and a port's GID table holds several
// (one per IP address and RoCE version), so one must be chosen, the way NCCL does unless CHORUS_IB_GID_INDEX
// names one; InfiniBand routes by LID and uses index 0. Pure (no verbs calls): the transport reads the table.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace chorus::transport::ibverbs {

enum class GidType { InfiniBand, RoCEv1, RoCEv2 };

struct GidEntry {
  int index = 0;
  std::array<uint8_t, 16> gid{};  // all zero: an empty slot
  GidType type = GidType::InfiniBand;
};

// The GID as IPv6 text ("fe80::1", "::ffff:10.0.0.1" for an IPv4-mapped one).
std::string gidText(const std::array<uint8_t, 16>& gid);

// table: every index of the port's GID table; requested: CHORUS_IB_GID_INDEX, -1 for automatic; where: the port
// for messages ("mlx5_0 port 1"). Automatic on RoCE (ethernet) prefers, in order: RoCE v2 with an IPv4-mapped
// address, RoCE v2 with a global IPv6 address, RoCE v1 with an IPv4-mapped address, any non-empty entry. Throws
// chorusInvalidArgument when `requested` is out of the table or names an empty slot, chorusSystemError when
// nothing usable is there.
int selectGid(const std::vector<GidEntry>& table, bool ethernet, int requested, const std::string& where);

}  // namespace chorus::transport::ibverbs
