#include "transports/ibverbs/gid_select.h"

#include <arpa/inet.h>

#include <algorithm>

#include "lib/base/error.h"

namespace chorus::transport::ibverbs {

namespace {

bool isEmpty(const GidEntry& e) {
  return std::all_of(e.gid.begin(), e.gid.end(), [](uint8_t b) { return b == 0; });
}

// ::ffff:0:0/96: the GID of an IPv4 address, the one routable RoCE v2 address most fabrics configure.
bool isIpv4Mapped(const GidEntry& e) {
  return std::all_of(e.gid.begin(), e.gid.begin() + 10, [](uint8_t b) { return b == 0; }) && e.gid[10] == 0xff &&
         e.gid[11] == 0xff;
}

// fe80::/10: present on every RoCE port, but not routed beyond its subnet.
bool isLinkLocal(const GidEntry& e) { return e.gid[0] == 0xfe && (e.gid[1] & 0xc0) == 0x80; }

std::string describe(const GidEntry& e) {
  const char* type = e.type == GidType::RoCEv2 ? " (RoCE v2)" : e.type == GidType::RoCEv1 ? " (RoCE v1)" : "";
  return fmt::format("{} {}{}", e.index, gidText(e.gid), type);
}

}  // namespace

std::string gidText(const std::array<uint8_t, 16>& gid) {
  char text[INET6_ADDRSTRLEN];
  inet_ntop(AF_INET6, gid.data(), text, sizeof text);
  return text;
}

int selectGid(const std::vector<GidEntry>& table, bool ethernet, int requested, const std::string& where) {
  if (requested >= 0) {
    if (static_cast<size_t>(requested) >= table.size())
      fail(chorusInvalidArgument, "environment variable CHORUS_IB_GID_INDEX={} is out of range for {}: its GID table "
           "has {} entries", requested, where, table.size());
    if (isEmpty(table[requested])) {
      std::string used;
      for (const GidEntry& e : table)
        if (!isEmpty(e)) used += (used.empty() ? "" : ", ") + describe(e);
      fail(chorusInvalidArgument, "environment variable CHORUS_IB_GID_INDEX={} names an empty slot of {}'s GID table "
           "({})", requested, where, used.empty() ? "every slot is empty" : "the non-empty ones: " + used);
    }
    return table[requested].index;
  }
  if (!ethernet) {
    if (table.empty() || isEmpty(table[0]))
      fail(chorusSystemError, "{} has no usable GID (index 0, which InfiniBand uses, is empty)", where);
    return table[0].index;
  }
  const auto first = [&](auto&& usable) {
    auto it = std::find_if(table.begin(), table.end(), [&](const GidEntry& e) { return !isEmpty(e) && usable(e); });
    return it == table.end() ? -1 : it->index;
  };
  for (int index : {first([](const GidEntry& e) { return e.type == GidType::RoCEv2 && isIpv4Mapped(e); }),
                    first([](const GidEntry& e) { return e.type == GidType::RoCEv2 && !isLinkLocal(e); }),
                    first([](const GidEntry& e) { return e.type == GidType::RoCEv1 && isIpv4Mapped(e); }),
                    first([](const GidEntry&) { return true; })})
    if (index >= 0) return index;
  fail(chorusSystemError, "{} has no usable GID (its table is empty)", where);
}

}  // namespace chorus::transport::ibverbs
