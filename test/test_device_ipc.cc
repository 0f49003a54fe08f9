// Device IPC (Note [Device IPC] in transports/ipc/ipc_transport.cc, Note [Device routes] in lib/comm/comm.cc): ranks
// of one host move device memory device to device through the memory plugin's IPC primitives, not through host
// memory. Over the fake devices (test/fixtures/memory/fakedev.cc) with a key per block, so a byte moved by anything
// but the device's own copy or reduction comes out wrong; every collective is compared bit for bit with host
// memory's. Ranks are threads here, so the fake device's IPC is its own pointers; CUDA IPC between processes runs
// in scripts/gpu-check.sh.
#include <dirent.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "test/comms.h"
#include "test/fake_device.h"
#include "test/ranks.h"
#include "test/space_matrix.h"
#include "transports/ipc/ipc_transport.h"

namespace {

using namespace chorus;
using namespace chorus::test::fakedev;
using test::check;
using test::DeviceBuf;
using test::runRanks;

// The fake device's memory the CPU may not touch: a key per block.
struct HostInaccessible {
  HostInaccessible() { fake().setHostAccessible(0); }
  ~HostInaccessible() { fake().setHostAccessible(1); }
};

// Pages of device IPC left in /dev/shm (there should be none once the communicators are gone).
int pagesLeft() {
  int n = 0;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d)) n += std::strncmp(e->d_name, "chorus-ipc-", 11) == 0;
    closedir(d);
  }
  return n;
}

struct Counters {
  long exports, opens, reduceStarts, pinned;
  static Counters now() {
    return {fake().ipcExports(), fake().ipcOpens(), fake().reduceStarts(), fake().hostAllocations()};
  }
};

class DeviceIpc : public ::testing::TestWithParam<int> {};

// Every collective, with the ring's reducing steps run by the device reading the peer's buffer; nothing is staged
// through host memory.
TEST_P(DeviceIpc, MovesDeviceMemoryDeviceToDeviceAndEqualsHost) {
  useDevice(0);
  HostInaccessible inaccessible;
  const Counters before = Counters::now();
  for (const char* algo : {"AUTO", "RING", "TREE"}) {
    SCOPED_TRACE(algo);
    runMatrix(GetParam(), algo, {Coll::AllReduce});
  }
  runMatrix(GetParam(), "AUTO", test::kAllButAllReduce);
  const Counters after = Counters::now();
  EXPECT_GT(after.exports, before.exports) << "no message went over device IPC";
  EXPECT_GT(after.reduceStarts, before.reduceStarts) << "no reducing step read the peer's buffer";
  EXPECT_EQ(after.pinned, before.pinned) << "device memory was staged through host memory";
  EXPECT_EQ(pagesLeft(), 0);
}

// Gather, Scatter and the per-rank counts (empty blocks included), PreMulSum's device multiply among the ops:
// the small matrix, device to device.
TEST_P(DeviceIpc, GatherScatterAndPerRankCountsMoveDeviceToDeviceAndEqualHost) {
  useDevice(0);
  HostInaccessible inaccessible;
  test::EnvGuard env;
  env.set("CHORUS_TEST_MATRIX", "small");
  const Counters before = Counters::now();
  runMatrix(GetParam(), "AUTO", test::kGatherScatterV);
  const Counters after = Counters::now();
  EXPECT_EQ(after.pinned, before.pinned) << "device memory was staged through host memory";
  EXPECT_GT(after.exports, before.exports) << "no message went over device IPC";
}

// CHORUS_DEVICE_IPC_REDUCE=0: the copy engine copies the peer's bytes to scratch and the device reduces after.
TEST_P(DeviceIpc, WithCopiesInsteadOfTheReduceKernelEqualsHost) {
  useDevice(0);
  HostInaccessible inaccessible;
  test::EnvGuard env;
  env.set("CHORUS_DEVICE_IPC_REDUCE", "0");
  env.set("CHORUS_TEST_MATRIX", "small");
  const Counters before = Counters::now();
  runMatrix(GetParam(), "RING", {Coll::AllReduce, Coll::ReduceScatter});
  const Counters after = Counters::now();
  EXPECT_GT(after.exports, before.exports);
  EXPECT_EQ(after.reduceStarts, before.reduceStarts) << "a reduction read the peer's buffer";
}

// Device work that takes a while (200 us per copy or reduction, on the device's own thread) while the host goes
// on: every message still completes in order and every result equals host memory's.
TEST_P(DeviceIpc, SlowDeviceWorkKeepsOrder) {
  useDevice(0);
  HostInaccessible inaccessible;
  test::EnvGuard env;
  env.set("CHORUS_TEST_MATRIX", "small");
  fake().setCopyDelayUs(200);
  runMatrix(GetParam(), "RING", {Coll::AllReduce});
  runMatrix(GetParam(), "AUTO", {Coll::AllGather, Coll::AllToAll, Coll::SendRecv, Coll::Broadcast});
  fake().setCopyDelayUs(0);
}

// Buffers the runtime cannot export (as CUDA's cudaMallocAsync pools and cuMemCreate): they go from a device
// bounce buffer of Chorus's, copied there by the device, and every result still equals host memory's.
TEST_P(DeviceIpc, BuffersThatCannotBeExportedGoThroughADeviceBounceBuffer) {
  useDevice(0);
  HostInaccessible inaccessible;
  test::EnvGuard env;
  env.set("CHORUS_TEST_MATRIX", "small");
  fake().setTestBuffersExportable(0);
  const long refusedBefore = fake().ipcExportsRefused(), exportsBefore = fake().ipcExports();
  runMatrix(GetParam(), "AUTO", {Coll::AllReduce, Coll::AllGather, Coll::SendRecv, Coll::Broadcast});
  fake().setTestBuffersExportable(1);
  EXPECT_GT(fake().ipcExportsRefused(), refusedBefore) << "no send came from a buffer that cannot be exported";
  EXPECT_GT(fake().ipcExports(), exportsBefore);
}

INSTANTIATE_TEST_SUITE_P(Ranks, DeviceIpc, ::testing::Values(2, 3, 4));

// One buffer sent from again and again is mapped once. More distinct buffers than the mapping cache holds: the
// least recently used mappings are closed, and every message still arrives intact. Then more messages than the ring
// of descriptors holds, posted at once.
TEST(DeviceIpcLimits, ManyBuffersAndManyMessagesInFlight) {
  useDevice(0);
  HostInaccessible inaccessible;
  const long closesBefore = fake().ipcCloses();
  constexpr int kBuffers = 200;
  long opensForOneBuffer = -1;
  auto errors = runRanks(2, [&](int r, chorusComm_t& comm) {
    {
      DeviceBuf one(dev(0), 64);
      check(chorusBarrier(comm, nullptr), comm, "barrier");
      const long opensBefore = fake().ipcOpens();
      for (int i = 0; i < 100; ++i)
        if (r == 0) check(chorusSend(one.data(), 64, chorusUint8, 1, comm, nullptr), comm, "send");
        else check(chorusRecv(one.data(), 64, chorusUint8, 0, comm, nullptr), comm, "recv");
      check(chorusBarrier(comm, nullptr), comm, "barrier");
      if (r == 1) opensForOneBuffer = fake().ipcOpens() - opensBefore;
    }
    std::vector<std::unique_ptr<DeviceBuf>> bufs;
    for (int i = 0; i < kBuffers; ++i) {
      bufs.push_back(std::make_unique<DeviceBuf>(dev(0), 64));
      bufs.back()->upload(std::vector<uint8_t>(64, static_cast<uint8_t>(r == 0 ? i : 0)));
    }
    for (int i = 0; i < kBuffers; ++i) {
      if (r == 0) check(chorusSend(bufs[i]->data(), 64, chorusUint8, 1, comm, nullptr), comm, "send");
      else check(chorusRecv(bufs[i]->data(), 64, chorusUint8, 0, comm, nullptr), comm, "recv");
    }
    // All 200 in one group: more than the ring's 64 descriptors in flight at once.
    check(chorusGroupStart(), comm, "group");
    for (int i = 0; i < kBuffers; ++i) {
      if (r == 0) check(chorusSend(bufs[i]->data(), 64, chorusUint8, 1, comm, nullptr), comm, "send");
      else check(chorusRecv(bufs[kBuffers - 1 - i]->data(), 64, chorusUint8, 0, comm, nullptr), comm, "recv");
    }
    check(chorusGroupEnd(), comm, "group end");
    if (r == 1)
      for (int i = 0; i < kBuffers; ++i) {
        const std::vector<uint8_t> got = bufs[kBuffers - 1 - i]->download();
        ASSERT_EQ(got, std::vector<uint8_t>(64, static_cast<uint8_t>(i))) << "buffer " << i;
      }
  });
  for (const auto& e : errors) ADD_FAILURE() << e;
  EXPECT_EQ(opensForOneBuffer, 1) << "100 messages from one buffer opened it " << opensForOneBuffer << " times";
  EXPECT_GE(fake().ipcCloses() - closesBefore, kBuffers - 128) << "the mapping cache was not bounded";
}

// Ranks that disagree on a message over device IPC: the receiver names both calls, the sender hears of it, and
// neither waits long.
TEST(DeviceIpcErrors, MismatchedCallsAreNamedAndNobodyHangs) {
  useDevice(0);
  HostInaccessible inaccessible;
  std::vector<chorusResult_t> rc(2);
  std::vector<std::string> text(2);
  std::vector<double> seconds(2);
  auto errors = runRanks(2, [&](int r, chorusComm_t& comm) {
    DeviceBuf a(dev(0), 64);
    const auto t0 = std::chrono::steady_clock::now();
    rc[r] = r == 0 ? chorusSend(a.data(), 8, chorusFloat32, 1, comm, nullptr)
                   : chorusRecv(a.data(), 16, chorusFloat32, 0, comm, nullptr);
    seconds[r] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    text[r] = chorusGetLastError(comm);
  });
  for (const auto& e : errors) ADD_FAILURE() << e;
  EXPECT_EQ(rc[1], chorusInvalidUsage) << text[1];
  for (const char* w : {"mismatched calls", "count 16", "count 8", "rank 0"})
    EXPECT_NE(text[1].find(w), std::string::npos) << "'" << w << "' not in: " << text[1];
  EXPECT_NE(rc[0], chorusSuccess);
  EXPECT_NE(text[0].find("rank 1"), std::string::npos) << text[0];
  for (int r = 0; r < 2; ++r) EXPECT_LT(seconds[r], 5.0) << "rank " << r << ": " << text[r];
  EXPECT_EQ(pagesLeft(), 0);
}

// A call that reaches every peer device to device is cut in device IPC's chunks (Note [Device IPC chunks]), not in
// the host transport's (1 MiB for shared memory): a ring AllReduce of 2 x 16 MiB segments over 2 ranks sends one
// message per step, and the result still equals the host's.
TEST(DeviceIpcChunks, ADeviceCallIsCutInDeviceIpcChunks) {
  useDevice(0);
  HostInaccessible inaccessible;
  test::EnvGuard env;
  env.set("CHORUS_ALGO", "ring");
  constexpr size_t kCount = 2 * transport::ipc::kChunkBytes / sizeof(float);
  long exports = 0;
  auto errors = runRanks(2, [&](int r, chorusComm_t& comm) {
    DeviceBuf buf(dev(0), kCount * sizeof(float));
    std::vector<float> v(kCount);
    for (size_t i = 0; i < kCount; ++i) v[i] = static_cast<float>((i % 1000) * (r + 1));
    uploadValues(buf, v);
    check(chorusBarrier(comm, nullptr), comm, "barrier");
    const long before = fake().ipcExports();
    check(chorusAllReduce(buf.data(), buf.data(), kCount, chorusFloat32, chorusSum, comm, nullptr), comm,
          "AllReduce");
    check(chorusBarrier(comm, nullptr), comm, "barrier");  // both ranks' sends counted
    if (r == 0) exports = fake().ipcExports() - before;
    v = downloadValues<float>(buf, kCount);
    for (size_t i = 0; i < kCount; ++i) ASSERT_EQ(v[i], static_cast<float>((i % 1000) * 3)) << "element " << i;
  });
  for (const auto& e : errors) ADD_FAILURE() << e;
  // Two ranks, each sending one chunk in its reduce-scatter step and one in its all-gather step (a barrier of two
  // ranks sends nothing over device IPC: it is host memory).
  EXPECT_EQ(exports, 4) << "messages sent over device IPC for a 32 MiB ring AllReduce of 2 ranks";
}

// Note [Peer access] in lib/comm/comm.cc: ranks on two devices go device to device where the devices reach each
// other, and stage through host memory where they do not (before, they mapped each other's memory regardless); the
// results equal the host's either way.
class DevicePeers : public ::testing::TestWithParam<int> {};

TEST_P(DevicePeers, RanksOnTwoDevicesGoDeviceToDeviceOnlyWhereTheDevicesReachEachOther) {
  const bool reach = GetParam() != 0;
  useDevice(0);
  HostInaccessible inaccessible;
  fake().setPeerAccess(reach ? 1 : 0);
  constexpr size_t kCount = 4099;
  long exports = 0, copies = 0;
  auto errors = runRanks(2, [&](int r, chorusComm_t& comm) {
    fake().setThreadCurrent(r);  // the split's communicator is made on device r
    chorusComm_t onDevice = nullptr;
    check(chorusCommSplit(comm, 0, r, &onDevice, nullptr), comm, "chorusCommSplit on device " + std::to_string(r));
    fake().setThreadCurrent(-1);
    DeviceBuf buf(dev(r), kCount * sizeof(float));
    std::vector<float> v(kCount);
    for (size_t i = 0; i < kCount; ++i) v[i] = static_cast<float>((i % 100) * (r + 1));
    uploadValues(buf, v);
    check(chorusBarrier(comm, nullptr), comm, "barrier");
    const long exportsBefore = fake().ipcExports(), copiesBefore = fake().copiesStarted();
    check(chorusAllReduce(buf.data(), buf.data(), kCount, chorusFloat32, chorusSum, onDevice, nullptr), onDevice,
          "AllReduce across the two devices");
    check(chorusBarrier(comm, nullptr), comm, "barrier");  // both ranks' work counted
    if (r == 0) exports = fake().ipcExports() - exportsBefore, copies = fake().copiesStarted() - copiesBefore;
    v = downloadValues<float>(buf, kCount);
    for (size_t i = 0; i < kCount; ++i) ASSERT_EQ(v[i], static_cast<float>((i % 100) * 3)) << "element " << i;
    check(chorusCommDestroy(onDevice), comm, "chorusCommDestroy");
  });
  for (const auto& e : errors) ADD_FAILURE() << e;
  fake().setPeerAccess(1);
  if (reach) {
    EXPECT_GT(exports, 0) << "devices that reach each other did not go device to device";
  } else {
    EXPECT_EQ(exports, 0) << "devices that cannot reach each other mapped each other's memory";
    EXPECT_GT(copies, 0) << "nothing was staged through host memory";
  }
}

INSTANTIATE_TEST_SUITE_P(Reach, DevicePeers, ::testing::Values(0, 1));

// CHORUS_DEVICE_IPC=0: the same calls go through pinned host memory (test_memory_spaces' Staged cases).
TEST(DeviceIpcSwitch, OffStagesThroughHostMemory) {
  useDevice(0);
  HostInaccessible inaccessible;
  test::EnvGuard env;
  env.set("CHORUS_DEVICE_IPC", "0");
  env.set("CHORUS_TEST_MATRIX", "small");
  const Counters before = Counters::now();
  runMatrix(2, "RING", {Coll::AllReduce});
  const Counters after = Counters::now();
  EXPECT_EQ(after.exports, before.exports) << "device IPC ran though CHORUS_DEVICE_IPC=0";
  EXPECT_GT(fake().copiesStarted(), 0);
}

}  // namespace
