// The ibverbs transport's pure policies, without a device: CHORUS_IB_HCA's grammar and the ports it selects
// (transports/ibverbs/hca_spec.h), the GID index a port uses (gid_select.h), and the registration cache against a
// fake registrar that checks every registration is deregistered exactly once (reg_cache.h).
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "lib/base/error.h"
#include "transports/ibverbs/gid_select.h"
#include "transports/ibverbs/hca_spec.h"
#include "transports/ibverbs/reg_cache.h"

using namespace chorus;
using namespace chorus::transport::ibverbs;
using ::testing::HasSubstr;

namespace {

// The error `f` throws (a failure if none).
template <typename F>
Error thrown(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no chorus::Error thrown";
  return Error(chorusSuccess, "");
}

// ---- CHORUS_IB_HCA ----

void expectRejected(const std::string& text, const std::string& why) {
  Error e = thrown([&] { parseHcaSpec(text); });
  EXPECT_EQ(e.code(), chorusInvalidArgument) << text;
  EXPECT_THAT(e.what(), HasSubstr("environment variable CHORUS_IB_HCA='" + text + "' is invalid: " + why));
}

PortInfo port(const std::string& device, int n, bool active, const std::string& linkLayer = "InfiniBand") {
  return {device, n, active, active ? "ACTIVE" : "DOWN", linkLayer};
}

// Two HCAs: mlx5_0 with port 2 down, and a RoCE one.
const std::vector<PortInfo> kPorts = {port("mlx5_0", 1, true), port("mlx5_0", 2, false),
                                      port("mlx5_1", 1, true, "Ethernet")};
const std::string kListing = "the devices here are mlx5_0 (port 1 active, port 2 down), mlx5_1 (port 1 active)";

std::vector<std::string> chosen(const std::string& text, const std::vector<PortInfo>& all = kPorts) {
  std::vector<std::string> out;
  for (const PortInfo& p : selectPorts(parseHcaSpec(text), all)) out.push_back(p.device + ":" + std::to_string(p.port));
  return out;
}

Error refusal(const std::string& text, const std::vector<PortInfo>& all = kPorts) {
  return thrown([&] { selectPorts(parseHcaSpec(text), all); });
}

// ---- GIDs ----

std::array<uint8_t, 16> gid(const char* text) {
  std::array<uint8_t, 16> g{};
  EXPECT_EQ(inet_pton(AF_INET6, text, g.data()), 1) << text;
  return g;
}

// A table of `n` empty slots; fill() sets one.
std::vector<GidEntry> emptyTable(int n) {
  std::vector<GidEntry> t(n);
  for (int i = 0; i < n; ++i) t[i].index = i;
  return t;
}
void fill(std::vector<GidEntry>& t, int i, const char* text, GidType type) {
  t[i].gid = gid(text);
  t[i].type = type;
}

// ---- registration cache ----

constexpr uintptr_t kPage = 4096;
constexpr uintptr_t kBase = 0x7f0000000000;

const void* at(uintptr_t pageNumber, uintptr_t offset = 0) {
  return reinterpret_cast<const void*>(kBase + pageNumber * kPage + offset);
}

// Hands out distinct keys and checks that every registration is deregistered once, and only those it made.
struct FakeRegistrar : Registrar {
  std::map<uint32_t, Registration> live;  // by lkey
  std::vector<uint32_t> deregistered;     // lkeys, in order
  int registrations = 0;
  uint32_t nextKey = 1;
  bool refuseNext = false;

  Registration registerMemory(uintptr_t base, size_t length, Access access) override {
    if (std::exchange(refuseNext, false)) fail(chorusSystemError, "ibv_reg_mr failed: Cannot allocate memory");
    ++registrations;
    Registration r{base, length, nextKey, nextKey + 1000, &live, access};
    ++nextKey;
    live[r.lkey] = r;
    return r;
  }
  void deregister(const Registration& r) noexcept override {
    auto it = live.find(r.lkey);
    EXPECT_NE(it, live.end()) << "lkey " << r.lkey << " deregistered twice or never registered";
    if (it == live.end()) return;
    EXPECT_EQ(it->second.base, r.base);
    EXPECT_EQ(it->second.length, r.length);
    live.erase(it);
    deregistered.push_back(r.lkey);
  }
  bool isLive(uint32_t lkey) const { return live.count(lkey) == 1; }
};

// The lkey that acquiring [page, page+pages) and releasing it at once gets.
uint32_t touch(RegCache& cache, uintptr_t page, size_t pages = 1) {
  return cache.acquire(at(page), pages * kPage, Access::Write).get().lkey;
}

}  // namespace

TEST(HcaGrammar, EmptySelectsEverything) {
  for (const char* text : {"", "  "}) {
    HcaSpec s = parseHcaSpec(text);
    EXPECT_FALSE(s.exclude);
    EXPECT_FALSE(s.exact);
    EXPECT_TRUE(s.entries.empty());
    EXPECT_TRUE(hcaSelects(s, "mlx5_0", 1));
    EXPECT_TRUE(hcaSelects(s, "bnxt_re0", 2));
  }
}

TEST(HcaGrammar, EveryForm) {
  HcaSpec s = parseHcaSpec("mlx5_0");
  ASSERT_EQ(s.entries.size(), 1u);
  EXPECT_EQ(s.entries[0].name, "mlx5_0");
  EXPECT_EQ(s.entries[0].port, 0);
  EXPECT_EQ(s.text, "mlx5_0");

  s = parseHcaSpec(" mlx5_0 : 1 ,\tmlx5_1:2 , mlx5_2 ");
  EXPECT_FALSE(s.exclude);
  EXPECT_FALSE(s.exact);
  ASSERT_EQ(s.entries.size(), 3u);
  EXPECT_EQ(s.entries[0].name, "mlx5_0");
  EXPECT_EQ(s.entries[0].port, 1);
  EXPECT_EQ(s.entries[1].name, "mlx5_1");
  EXPECT_EQ(s.entries[1].port, 2);
  EXPECT_EQ(s.entries[2].name, "mlx5_2");
  EXPECT_EQ(s.entries[2].port, 0);

  s = parseHcaSpec("^mlx5_0");
  EXPECT_TRUE(s.exclude);
  EXPECT_FALSE(s.exact);
  s = parseHcaSpec("=mlx5_0");
  EXPECT_FALSE(s.exclude);
  EXPECT_TRUE(s.exact);
  s = parseHcaSpec(" ^ = mlx5_0:1");
  EXPECT_TRUE(s.exclude);
  EXPECT_TRUE(s.exact);
  ASSERT_EQ(s.entries.size(), 1u);
  EXPECT_EQ(s.entries[0].name, "mlx5_0");
  EXPECT_EQ(s.entries[0].port, 1);
}

TEST(HcaGrammar, Rejections) {
  expectRejected("mlx5_0,,mlx5_1", "entry 2 is empty");
  expectRejected(",mlx5_0", "entry 1 is empty");
  expectRejected("mlx5_0,", "entry 2 is empty");
  expectRejected("mlx5_0, ,mlx5_1", "entry 2 is empty");
  expectRejected("^", "it lists no device");
  expectRejected("=", "it lists no device");
  expectRejected("^=", "it lists no device");
  expectRejected(":1", "entry ':1' has no device name");
  expectRejected("mlx5_0, :2", "entry ':2' has no device name");
  expectRejected("^=:1", "entry ':1' has no device name");
  for (const char* bad : {"0", "x", "-1", "", "1x", "+1", "1:2", "99999999999"})
    expectRejected(std::string("mlx5_0:") + bad,
                   std::string("entry 'mlx5_0:") + bad + "' has port '" + bad + "', which is not a positive integer");
}

TEST(HcaGrammar, NamesArePrefixesUnlessExact) {
  HcaSpec prefix = parseHcaSpec("mlx5");
  EXPECT_TRUE(hcaSelects(prefix, "mlx5_0", 1));
  EXPECT_TRUE(hcaSelects(prefix, "mlx5_1", 2));
  EXPECT_FALSE(hcaSelects(prefix, "mlx4_0", 1));
  EXPECT_TRUE(hcaSelects(parseHcaSpec("mlx5_1"), "mlx5_10", 1));  // as NCCL does
  HcaSpec exact = parseHcaSpec("=mlx5_1");
  EXPECT_TRUE(hcaSelects(exact, "mlx5_1", 1));
  EXPECT_FALSE(hcaSelects(exact, "mlx5_10", 1));
  EXPECT_FALSE(hcaSelects(parseHcaSpec("=mlx5"), "mlx5_0", 1));
  EXPECT_FALSE(hcaSelects(parseHcaSpec("mlx5_0_extra"), "mlx5_0", 1));
}

TEST(HcaGrammar, PortsAndExclusion) {
  HcaSpec p2 = parseHcaSpec("mlx5_0:2");
  EXPECT_FALSE(hcaSelects(p2, "mlx5_0", 1));
  EXPECT_TRUE(hcaSelects(p2, "mlx5_0", 2));
  EXPECT_FALSE(hcaSelects(p2, "mlx5_1", 2));

  HcaSpec notDevice = parseHcaSpec("^mlx5_0");
  EXPECT_FALSE(hcaSelects(notDevice, "mlx5_0", 1));
  EXPECT_FALSE(hcaSelects(notDevice, "mlx5_0", 2));
  EXPECT_TRUE(hcaSelects(notDevice, "mlx5_1", 1));

  HcaSpec notPort = parseHcaSpec("^mlx5_0:1");
  EXPECT_FALSE(hcaSelects(notPort, "mlx5_0", 1));
  EXPECT_TRUE(hcaSelects(notPort, "mlx5_0", 2));
  EXPECT_TRUE(hcaSelects(notPort, "mlx5_1", 1));

  HcaSpec notPrefix = parseHcaSpec("^mlx5");
  EXPECT_FALSE(hcaSelects(notPrefix, "mlx5_1", 1));
  EXPECT_TRUE(hcaSelects(notPrefix, "bnxt_re0", 1));
  EXPECT_TRUE(hcaSelects(parseHcaSpec("^=mlx5"), "mlx5_1", 1));
}

TEST(HcaSelect, ActivePortsInTheDevicesOrder) {
  using V = std::vector<std::string>;
  EXPECT_EQ(chosen(""), (V{"mlx5_0:1", "mlx5_1:1"}));
  EXPECT_EQ(chosen("mlx5_1,mlx5_0"), (V{"mlx5_0:1", "mlx5_1:1"}));
  EXPECT_EQ(chosen("mlx5"), (V{"mlx5_0:1", "mlx5_1:1"}));
  EXPECT_EQ(chosen("mlx5_0"), (V{"mlx5_0:1"}));  // port 2 is down: a device's down ports are skipped
  EXPECT_EQ(chosen("mlx5_1:1"), (V{"mlx5_1:1"}));
  EXPECT_EQ(chosen("^mlx5_0"), (V{"mlx5_1:1"}));
  EXPECT_EQ(chosen("^mlx5_0:2"), (V{"mlx5_0:1", "mlx5_1:1"}));  // excluding a down port asks nothing of it
  EXPECT_EQ(chosen("mlx5_0:1,mlx9:1"), (V{"mlx5_0:1"}));  // a device absent here is no error
  EXPECT_EQ(chosen("mlx5_0:1,mlx5_0"), (V{"mlx5_0:1"}));   // each port once
  std::vector<PortInfo> ports = selectPorts(parseHcaSpec("mlx5_1"), kPorts);
  ASSERT_EQ(ports.size(), 1u);
  EXPECT_EQ(ports[0].linkLayer, "Ethernet");
}

TEST(HcaSelect, NoDevice) {
  Error e = refusal("", {});
  EXPECT_EQ(e.code(), chorusSystemError);
  EXPECT_THAT(e.what(), HasSubstr("no RDMA device"));
  EXPECT_EQ(refusal("mlx5_0", {}).code(), chorusSystemError);
}

TEST(HcaSelect, NothingMatchedListsTheDevices) {
  Error e = refusal("mlx9");
  EXPECT_EQ(e.code(), chorusInvalidArgument);
  EXPECT_STREQ(e.what(), ("environment variable CHORUS_IB_HCA='mlx9' names no RDMA device: " + kListing).c_str());
  e = refusal("=mlx5");
  EXPECT_EQ(e.code(), chorusInvalidArgument);
  EXPECT_THAT(e.what(), HasSubstr("CHORUS_IB_HCA='=mlx5' names no RDMA device: " + kListing));
  e = refusal("^mlx5");
  EXPECT_EQ(e.code(), chorusInvalidArgument);
  EXPECT_THAT(e.what(), HasSubstr("CHORUS_IB_HCA='^mlx5' excludes every RDMA port: " + kListing));
}

TEST(HcaSelect, ExplicitPortMustExistAndBeActive) {
  Error e = refusal("mlx5_0:2");
  EXPECT_EQ(e.code(), chorusInvalidArgument);
  EXPECT_STREQ(e.what(), "environment variable CHORUS_IB_HCA='mlx5_0:2': port 2 of mlx5_0 is DOWN");
  e = refusal("mlx5_1,mlx5_0:2");  // even when other entries select active ports
  EXPECT_THAT(e.what(), HasSubstr("CHORUS_IB_HCA='mlx5_1,mlx5_0:2': port 2 of mlx5_0 is DOWN"));
  e = refusal("mlx5:2");  // a prefix names every device it matches
  EXPECT_EQ(e.code(), chorusInvalidArgument);
  EXPECT_THAT(e.what(), HasSubstr("CHORUS_IB_HCA='mlx5:2': port 2 of mlx5_0 is DOWN"));

  e = refusal("mlx5_0:3");
  EXPECT_EQ(e.code(), chorusInvalidArgument);
  EXPECT_STREQ(e.what(), ("environment variable CHORUS_IB_HCA='mlx5_0:3': mlx5_0 has no port 3: " + kListing).c_str());

  std::vector<PortInfo> initializing = {{"mlx5_0", 1, false, "INIT", "InfiniBand"},
                                        {"mlx5_0", 2, false, "", "InfiniBand"}};
  EXPECT_THAT(refusal("mlx5_0:1", initializing).what(), HasSubstr("port 1 of mlx5_0 is INIT"));
  EXPECT_THAT(refusal("mlx5_0:2", initializing).what(), HasSubstr("port 2 of mlx5_0 is not active"));
}

TEST(HcaSelect, NoActivePort) {
  std::vector<PortInfo> down = {port("mlx5_0", 1, false), {"mlx5_1", 1, false, "INIT", "Ethernet"},
                                {"mlx5_1", 2, false, "", "Ethernet"}};
  Error e = refusal("", down);
  EXPECT_EQ(e.code(), chorusSystemError);
  EXPECT_STREQ(e.what(), "no active RDMA port: the devices here are mlx5_0 (port 1 down), mlx5_1 (port 1 init, "
                         "port 2 not active)");
  // Selected, but down: the ports' state is at fault, not the setting; still named.
  std::vector<PortInfo> oneUp = {port("mlx5_0", 1, false), port("mlx5_1", 1, true)};
  e = refusal("mlx5_0", oneUp);
  EXPECT_EQ(e.code(), chorusSystemError);
  EXPECT_STREQ(e.what(), "no active RDMA port among those environment variable CHORUS_IB_HCA='mlx5_0' selects: the "
                         "devices here are mlx5_0 (port 1 down), mlx5_1 (port 1 active)");
  EXPECT_EQ(refusal("^mlx5_1", oneUp).code(), chorusSystemError);
}

TEST(Gid, Text) {
  EXPECT_EQ(gidText(gid("fe80::1")), "fe80::1");
  EXPECT_EQ(gidText(gid("::ffff:10.0.0.1")), "::ffff:10.0.0.1");
  EXPECT_EQ(gidText(gid("2001:db8::5")), "2001:db8::5");
  EXPECT_EQ(gidText({}), "::");
}

TEST(Gid, InfiniBandUsesIndexZero) {
  std::vector<GidEntry> t = emptyTable(4);
  fill(t, 0, "fe80::2c9:300:1:1", GidType::InfiniBand);
  fill(t, 1, "fe80::2c9:300:1:2", GidType::InfiniBand);
  EXPECT_EQ(selectGid(t, false, -1, "mlx5_0 port 1"), 0);
  EXPECT_EQ(selectGid(t, false, 1, "mlx5_0 port 1"), 1);

  t[0].gid = {};
  Error e = thrown([&] { selectGid(t, false, -1, "mlx5_0 port 1"); });
  EXPECT_EQ(e.code(), chorusSystemError);
  EXPECT_THAT(e.what(), HasSubstr("mlx5_0 port 1 has no usable GID"));
  EXPECT_EQ(thrown([&] { selectGid({}, false, -1, "mlx5_0 port 1"); }).code(), chorusSystemError);
}

TEST(Gid, RoCEPreferenceOrder) {
  std::vector<GidEntry> t = emptyTable(8);
  fill(t, 0, "fe80::1", GidType::RoCEv1);
  fill(t, 1, "fe80::1", GidType::RoCEv2);        // link-local v2: never preferred
  fill(t, 2, "::ffff:10.0.0.1", GidType::RoCEv1);
  fill(t, 3, "2001:db8::1", GidType::RoCEv2);
  fill(t, 5, "::ffff:10.0.0.1", GidType::RoCEv2);
  fill(t, 6, "::ffff:10.0.0.2", GidType::RoCEv2);
  const std::string where = "mlx5_1 port 1";
  EXPECT_EQ(selectGid(t, true, -1, where), 5);  // the first v2 IPv4-mapped one
  t[5].gid = {};
  EXPECT_EQ(selectGid(t, true, -1, where), 6);
  t[6].gid = {};
  EXPECT_EQ(selectGid(t, true, -1, where), 3);  // then v2 global IPv6
  t[3].gid = {};
  EXPECT_EQ(selectGid(t, true, -1, where), 2);  // then v1 IPv4-mapped
  t[2].gid = {};
  EXPECT_EQ(selectGid(t, true, -1, where), 0);  // then the first non-empty one
  t[0].gid = {};
  EXPECT_EQ(selectGid(t, true, -1, where), 1);
  t[1].gid = {};
  Error e = thrown([&] { selectGid(t, true, -1, where); });
  EXPECT_EQ(e.code(), chorusSystemError);
  EXPECT_STREQ(e.what(), "mlx5_1 port 1 has no usable GID (its table is empty)");
  EXPECT_EQ(thrown([&] { selectGid({}, true, -1, where); }).code(), chorusSystemError);
}

TEST(Gid, RoCEv1IPv4BeforeOtherTypes) {
  std::vector<GidEntry> t = emptyTable(3);
  fill(t, 0, "fe80::1", GidType::RoCEv2);
  fill(t, 1, "2001:db8::1", GidType::RoCEv1);  // global, but v1: not the second rule
  fill(t, 2, "::ffff:192.168.1.7", GidType::RoCEv1);
  EXPECT_EQ(selectGid(t, true, -1, "mlx5_1 port 1"), 2);
}

TEST(Gid, RequestedIndex) {
  std::vector<GidEntry> t = emptyTable(4);
  fill(t, 0, "fe80::1", GidType::RoCEv1);
  fill(t, 1, "fe80::1", GidType::RoCEv2);
  fill(t, 3, "::ffff:10.0.0.1", GidType::RoCEv2);
  EXPECT_EQ(selectGid(t, true, 1, "mlx5_0 port 1"), 1);  // overrides the automatic choice (3)
  EXPECT_EQ(selectGid(t, true, 0, "mlx5_0 port 1"), 0);

  Error e = thrown([&] { selectGid(t, true, 7, "mlx5_0 port 1"); });
  EXPECT_EQ(e.code(), chorusInvalidArgument);
  EXPECT_STREQ(e.what(), "environment variable CHORUS_IB_GID_INDEX=7 is out of range for mlx5_0 port 1: its GID "
                         "table has 4 entries");
  EXPECT_EQ(thrown([&] { selectGid(t, true, 4, "mlx5_0 port 1"); }).code(), chorusInvalidArgument);

  e = thrown([&] { selectGid(t, true, 2, "mlx5_0 port 1"); });
  EXPECT_EQ(e.code(), chorusInvalidArgument);
  EXPECT_STREQ(e.what(), "environment variable CHORUS_IB_GID_INDEX=2 names an empty slot of mlx5_0 port 1's GID "
                         "table (the non-empty ones: 0 fe80::1 (RoCE v1), 1 fe80::1 (RoCE v2), 3 ::ffff:10.0.0.1 "
                         "(RoCE v2))");
  e = thrown([&] { selectGid(emptyTable(2), false, 1, "mlx5_0 port 1"); });
  EXPECT_EQ(e.code(), chorusInvalidArgument);
  EXPECT_THAT(e.what(), HasSubstr("CHORUS_IB_GID_INDEX=1 names an empty slot of mlx5_0 port 1's GID table (every "
                                  "slot is empty)"));
}

TEST(RegCache, MissThenHitOnACoveringEntry) {
  FakeRegistrar fake;
  RegCache cache(fake, 64 * kPage);
  uint32_t key;
  {
    RegCache::Lease l = cache.acquire(at(10, 100), 200, Access::Write);
    const Registration& r = l.get();
    EXPECT_EQ(r.base, kBase + 10 * kPage);  // rounded out to pages
    EXPECT_EQ(r.length, kPage);
    EXPECT_EQ(r.rkey, r.lkey + 1000);
    EXPECT_EQ(r.handle, &fake.live);
    key = r.lkey;
  }
  EXPECT_TRUE(fake.isLive(key));  // kept after the lease ends
  EXPECT_EQ(cache.acquire(at(10), kPage, Access::Write).get().lkey, key);
  EXPECT_EQ(cache.acquire(at(10, 4000), 96, Access::Write).get().lkey, key);
  EXPECT_EQ(cache.acquire(at(10, 17), 0, Access::Write).get().lkey, key);
  EXPECT_EQ(fake.registrations, 1);
  RegCache::Stats s = cache.stats();
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.hits, 3u);
  EXPECT_EQ(s.entries, 1u);
  EXPECT_EQ(s.bytes, kPage);
  EXPECT_EQ(s.evictions, 0u);
}

TEST(RegCache, RangesAreRoundedOutToPages) {
  FakeRegistrar fake;
  RegCache cache(fake, 64 * kPage);
  RegCache::Lease straddling = cache.acquire(at(20, kPage - 16), 32, Access::Write);
  EXPECT_EQ(straddling.get().base, kBase + 20 * kPage);
  EXPECT_EQ(straddling.get().length, 2 * kPage);
  RegCache::Lease empty = cache.acquire(at(30, 5), 0, Access::Write);  // len 0: the page at p
  EXPECT_EQ(empty.get().base, kBase + 30 * kPage);
  EXPECT_EQ(empty.get().length, kPage);
  RegCache::Lease exact = cache.acquire(at(40), 3 * kPage, Access::Write);
  EXPECT_EQ(exact.get().length, 3 * kPage);

  FakeRegistrar fake2;
  RegCache bigPages(fake2, 1 << 30, 2 << 20);
  EXPECT_EQ(bigPages.acquire(at(1), 1, Access::Write).get().base, kBase);
  EXPECT_EQ(fake2.live.begin()->second.length, size_t{2} << 20);
}

TEST(RegCache, PartialOverlapReplacesAnIdleEntry) {
  FakeRegistrar fake;
  RegCache cache(fake, 64 * kPage);
  const uint32_t a = touch(cache, 10, 2);                   // pages 10-11
  const uint32_t b = touch(cache, 11, 2);                   // pages 11-12: not covered by a
  EXPECT_NE(a, b);
  EXPECT_FALSE(fake.isLive(a));                             // replaced
  EXPECT_EQ(cache.stats().entries, 1u);
  EXPECT_EQ(cache.stats().bytes, 2 * kPage);
  EXPECT_EQ(cache.stats().evictions, 0u);                   // a replacement, not an eviction
  EXPECT_EQ(touch(cache, 12), b);
  const uint32_t c = touch(cache, 10);                      // a's first page: b does not cover it
  EXPECT_NE(c, b);
  EXPECT_TRUE(fake.isLive(b));                              // adjacent, not overlapping
  const uint32_t wide = touch(cache, 9, 5);                 // covers both: both replaced
  EXPECT_FALSE(fake.isLive(b));
  EXPECT_FALSE(fake.isLive(c));
  EXPECT_EQ(touch(cache, 11), wide);
  EXPECT_EQ(cache.stats().entries, 1u);
  EXPECT_EQ(fake.live.size(), 1u);
}

TEST(RegCache, PartialOverlapRetiresAnEntryInUse) {
  FakeRegistrar fake;
  RegCache cache(fake, 64 * kPage);
  RegCache::Lease held = cache.acquire(at(10), 2 * kPage, Access::Write);
  const uint32_t a = held.get().lkey;
  const uint32_t b = touch(cache, 11, 2);
  EXPECT_TRUE(fake.isLive(a));  // in use: kept registered
  EXPECT_EQ(held.get().lkey, a);
  EXPECT_EQ(cache.stats().entries, 2u);
  EXPECT_EQ(cache.stats().bytes, 4 * kPage);
  EXPECT_EQ(touch(cache, 11), b);
  held.release();
  EXPECT_FALSE(fake.isLive(a));  // replaced: deregistered as soon as its use ends
  EXPECT_EQ(cache.stats().entries, 1u);
  EXPECT_NE(touch(cache, 10), a);
}

TEST(RegCache, EvictsTheLeastRecentlyUsed) {
  FakeRegistrar fake;
  RegCache cache(fake, 3 * kPage);
  const uint32_t a = touch(cache, 1), b = touch(cache, 3), c = touch(cache, 5);
  EXPECT_EQ(cache.stats().evictions, 0u);
  EXPECT_EQ(touch(cache, 1), a);  // a is now the most recently used: b goes first
  const uint32_t d = touch(cache, 7);
  EXPECT_EQ(fake.deregistered, (std::vector<uint32_t>{b}));
  const uint32_t e = touch(cache, 9);
  EXPECT_EQ(fake.deregistered, (std::vector<uint32_t>{b, c}));
  const uint32_t f = touch(cache, 11, 2);  // two pages: the two least recently used go
  EXPECT_EQ(fake.deregistered, (std::vector<uint32_t>{b, c, a, d}));
  EXPECT_TRUE(fake.isLive(e));
  EXPECT_TRUE(fake.isLive(f));
  RegCache::Stats s = cache.stats();
  EXPECT_EQ(s.evictions, 4u);
  EXPECT_EQ(s.bytes, 3 * kPage);
  EXPECT_EQ(s.entries, 2u);
}

TEST(RegCache, StaysWithinTheBound) {
  FakeRegistrar fake;
  const size_t bound = 10 * kPage;
  RegCache cache(fake, bound);
  std::minstd_rand random(7);
  for (int i = 0; i < 200; ++i) {
    touch(cache, random() % 8 * 4, 1 + random() % 4);  // 8 places, more than the bound holds
    EXPECT_LE(cache.stats().bytes, bound);
    size_t registered = 0;
    for (const auto& [key, r] : fake.live) registered += r.length;
    EXPECT_EQ(registered, cache.stats().bytes);
    EXPECT_EQ(fake.live.size(), cache.stats().entries);
  }
  EXPECT_GT(cache.stats().evictions, 0u);
  EXPECT_GT(cache.stats().hits, 0u);
}

TEST(RegCache, EntriesInUseAreNeverEvicted) {
  FakeRegistrar fake;
  RegCache cache(fake, 2 * kPage);
  RegCache::Lease a = cache.acquire(at(1), kPage, Access::Write);
  RegCache::Lease b = cache.acquire(at(3), 2 * kPage, Access::Write);
  RegCache::Lease c = cache.acquire(at(6), kPage, Access::Write);
  EXPECT_EQ(cache.stats().bytes, 4 * kPage);  // over the bound while held
  EXPECT_EQ(fake.deregistered.size(), 0u);
  const uint32_t ka = a.get().lkey, kb = b.get().lkey, kc = c.get().lkey;
  a.release();  // still over: evicted at once
  EXPECT_EQ(fake.deregistered, (std::vector<uint32_t>{ka}));
  c.release();  // 3 pages: still over
  EXPECT_EQ(fake.deregistered, (std::vector<uint32_t>{ka, kc}));
  b.release();  // 2 pages: fits
  EXPECT_TRUE(fake.isLive(kb));
  EXPECT_EQ(cache.stats().bytes, 2 * kPage);
  EXPECT_EQ(touch(cache, 3, 2), kb);
}

TEST(RegCache, AnEntryLargerThanTheBound) {
  FakeRegistrar fake;
  RegCache cache(fake, kPage);
  const uint32_t small = touch(cache, 100);
  RegCache::Lease big = cache.acquire(at(0), 16 * kPage, Access::Write);
  EXPECT_FALSE(fake.isLive(small));  // evicted to make room, though there is not enough
  EXPECT_EQ(cache.acquire(at(5), kPage, Access::Write).get().lkey, big.get().lkey);  // reused while held
  const uint32_t key = big.get().lkey;
  big.release();
  EXPECT_FALSE(fake.isLive(key));
  EXPECT_EQ(cache.stats().bytes, 0u);
  EXPECT_EQ(cache.stats().entries, 0u);
}

TEST(RegCache, CapacityZeroKeepsNothing) {
  FakeRegistrar fake;
  RegCache cache(fake, 0);
  RegCache::Lease first = cache.acquire(at(1), kPage, Access::Write);
  RegCache::Lease second = cache.acquire(at(1), 10, Access::Write);  // shares the entry while it is in use
  const uint32_t key = first.get().lkey;
  EXPECT_EQ(second.get().lkey, key);
  EXPECT_EQ(fake.registrations, 1);
  first.release();
  EXPECT_TRUE(fake.isLive(key));
  second.release();
  EXPECT_FALSE(fake.isLive(key));  // the last lease ended
  EXPECT_NE(touch(cache, 1), key);
  EXPECT_TRUE(fake.live.empty());
  EXPECT_EQ(cache.stats().entries, 0u);
}

TEST(RegCache, InvalidateDeregistersAnIdleEntryNow) {
  FakeRegistrar fake;
  RegCache cache(fake, 64 * kPage);
  const uint32_t a = touch(cache, 10, 4), neighbour = touch(cache, 14);
  cache.invalidate(at(13, 100), 8);  // one byte of a's last page is enough
  EXPECT_FALSE(fake.isLive(a));
  EXPECT_TRUE(fake.isLive(neighbour));
  EXPECT_EQ(cache.stats().entries, 1u);
  EXPECT_EQ(cache.stats().evictions, 0u);
  EXPECT_NE(touch(cache, 10), a);
  cache.invalidate(at(50), 10 * kPage);  // nothing there
  EXPECT_EQ(cache.stats().entries, 2u);
}

// A send's source is registered for reading only, so read-only memory can be sent. An entry made for writing
// serves a read too; one made for reading does not serve a write, which gets an entry of its own replacing it.
TEST(RegCache, AReadEntryServesNoWriteAndAWriteEntryServesBoth) {
  FakeRegistrar fake;
  RegCache cache(fake, 64 * kPage);
  const uint32_t read = cache.acquire(at(10), kPage, Access::Read).get().lkey;
  EXPECT_EQ(fake.live.at(read).access, Access::Read);
  EXPECT_EQ(cache.acquire(at(10, 8), 16, Access::Read).get().lkey, read);
  const uint32_t write = cache.acquire(at(10), kPage, Access::Write).get().lkey;
  EXPECT_NE(write, read);
  EXPECT_EQ(fake.live.at(write).access, Access::Write);
  EXPECT_FALSE(fake.isLive(read));  // replaced, and not in use: deregistered at once
  EXPECT_EQ(cache.acquire(at(10), kPage, Access::Read).get().lkey, write);
  EXPECT_EQ(fake.registrations, 2);
  EXPECT_EQ(cache.stats().entries, 1u);
}

TEST(RegCache, InvalidateWaitsForTheLastLeaseAndNeverReuses) {
  FakeRegistrar fake;
  RegCache cache(fake, 64 * kPage);
  RegCache::Lease one = cache.acquire(at(10), kPage, Access::Write);
  RegCache::Lease two = cache.acquire(at(10), kPage, Access::Write);
  const uint32_t old = one.get().lkey;
  cache.invalidate(at(10), kPage);
  EXPECT_TRUE(fake.isLive(old));  // in use
  EXPECT_EQ(one.get().lkey, old);
  RegCache::Lease fresh = cache.acquire(at(10), kPage, Access::Write);  // the memory there now: a new registration
  EXPECT_NE(fresh.get().lkey, old);
  one.release();
  EXPECT_TRUE(fake.isLive(old));
  two.release();
  EXPECT_FALSE(fake.isLive(old));
  const uint32_t now = fresh.get().lkey;
  fresh.release();
  EXPECT_TRUE(fake.isLive(now));  // the new entry is cached as usual
  EXPECT_EQ(touch(cache, 10), now);
}

TEST(RegCache, ARefusedRegistrationChangesNothing) {
  FakeRegistrar fake;
  RegCache cache(fake, 64 * kPage);
  const uint32_t a = touch(cache, 10, 2);
  RegCache::Stats before = cache.stats();
  fake.refuseNext = true;
  Error e = thrown([&] { cache.acquire(at(11), 2 * kPage, Access::Write); });  // would replace a
  EXPECT_EQ(e.code(), chorusSystemError);
  EXPECT_THAT(e.what(), HasSubstr("ibv_reg_mr failed"));
  EXPECT_TRUE(fake.isLive(a));
  RegCache::Stats after = cache.stats();
  EXPECT_EQ(after.misses, before.misses);
  EXPECT_EQ(after.bytes, before.bytes);
  EXPECT_EQ(after.entries, before.entries);
  EXPECT_EQ(touch(cache, 10, 2), a);
}

TEST(RegCache, LeasesMoveAndReleaseOnce) {
  FakeRegistrar fake;
  RegCache cache(fake, 0);
  RegCache::Lease a = cache.acquire(at(1), kPage, Access::Write);
  const uint32_t ka = a.get().lkey;
  RegCache::Lease moved(std::move(a));
  a.release();  // empty: nothing happens
  EXPECT_TRUE(fake.isLive(ka));
  RegCache::Lease b = cache.acquire(at(3), kPage, Access::Write);
  const uint32_t kb = b.get().lkey;
  b = std::move(moved);  // ends b's use, takes a's
  EXPECT_FALSE(fake.isLive(kb));
  EXPECT_TRUE(fake.isLive(ka));
  EXPECT_EQ(b.get().lkey, ka);
  RegCache::Lease none;
  b = std::move(none);
  EXPECT_FALSE(fake.isLive(ka));
}

TEST(RegCache, DestructionDeregistersEverything) {
  FakeRegistrar fake;
  {
    RegCache cache(fake, 64 * kPage);
    for (uintptr_t i = 0; i < 10; ++i) touch(cache, 3 * i, 2);
    RegCache::Lease held = cache.acquire(at(100), kPage, Access::Write);
    cache.invalidate(at(0), kPage);
    EXPECT_EQ(fake.live.size(), 10u);
  }
  EXPECT_TRUE(fake.live.empty());
  EXPECT_EQ(fake.deregistered.size(), static_cast<size_t>(fake.registrations));
}

// The issue's own example: a '^' before a later entry leaves that entry out of what the others select, while a
// leading '^' keeps NCCL's meaning (the whole list excluded).
TEST(IbverbsHcaSpec, ALaterCaretExcludesOnlyItsEntry) {
  HcaSpec s = parseHcaSpec("mlx5_0:1,^mlx5_2");
  ASSERT_EQ(s.entries.size(), 2u);
  EXPECT_FALSE(s.exclude);
  EXPECT_FALSE(s.entries[0].exclude);
  EXPECT_TRUE(s.entries[1].exclude);
  EXPECT_EQ(s.entries[1].name, "mlx5_2");
  EXPECT_TRUE(hcaSelects(s, "mlx5_0", 1));
  EXPECT_FALSE(hcaSelects(s, "mlx5_0", 2));
  EXPECT_FALSE(hcaSelects(s, "mlx5_2", 1));
  HcaSpec most = parseHcaSpec("mlx5, ^mlx5_1");
  EXPECT_TRUE(hcaSelects(most, "mlx5_0", 1));
  EXPECT_FALSE(hcaSelects(most, "mlx5_1", 1));
  EXPECT_TRUE(hcaSelects(most, "mlx5_2", 1));
  EXPECT_FALSE(hcaSelects(most, "ib0", 1));
  HcaSpec onlyOut = parseHcaSpec("mlx5_0,^mlx5_0:2");  // a port of an included device
  EXPECT_TRUE(hcaSelects(onlyOut, "mlx5_0", 1));
  EXPECT_FALSE(hcaSelects(onlyOut, "mlx5_0", 2));
  HcaSpec whole = parseHcaSpec("^mlx5_0,mlx5_1");  // NCCL's: both excluded
  EXPECT_TRUE(whole.exclude);
  EXPECT_FALSE(hcaSelects(whole, "mlx5_0", 1));
  EXPECT_FALSE(hcaSelects(whole, "mlx5_1", 1));
  EXPECT_TRUE(hcaSelects(whole, "mlx5_2", 1));
  // An explicit port on an excluded entry asks nothing of that port.
  std::vector<PortInfo> all = {{"mlx5_0", 1, true, "ACTIVE", "InfiniBand"}, {"mlx5_2", 1, false, "DOWN", "Ethernet"}};
  auto chosen = selectPorts(parseHcaSpec("mlx5_0:1,^mlx5_2:1"), all);
  ASSERT_EQ(chosen.size(), 1u);
  EXPECT_EQ(chosen[0].device, "mlx5_0");
  try {
    selectPorts(parseHcaSpec("^mlx5_0,^mlx5_2"), all);
    FAIL() << "a list of exclusions that leaves nothing was accepted";
  } catch (const chorus::Error& e) {
    EXPECT_NE(std::string(e.what()).find("excludes every RDMA port"), std::string::npos) << e.what();
  }
  try {
    parseHcaSpec("mlx5_0,^");
    FAIL() << "an empty exclusion was accepted";
  } catch (const chorus::Error& e) {
    EXPECT_EQ(e.code(), chorusInvalidArgument);
  }
}
