// The memory-space seam (Note [Memory spaces], lib/mem/space.h) and memory plugins (Note [Memory plugins],
// transports/plugin.h), with a plugin of two fake devices (test/fixtures/memory/fakedev.cc) whose memory holds
// every byte XOR a key. Bytes moved as they are stay right there, but a reduction or an Avg scale done on that
// memory other than through the plugin gives wrong values, and so does a copy between it and host memory. So
// every collective, run over a fake device's buffers and compared bit for bit with the same call over host memory
// (which test_collectives checks against its reference), shows that the algorithms did their data work through
// the call's Space, across the plugin boundary. Also: which buffers the API accepts, how it refuses the others,
// and a device error inside a collective.
#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "transports/plugin.h"
#include "transports/registry.h"
#include "test/ranks.h"
#include "test/shell.h"
#include "test/reference.h"
#include "test/space_matrix.h"
#include "test/fake_device.h"
#include "test/watchdog.h"

namespace {

using namespace chorus;
using test::check;
using test::runRanks;
using test::Coll;
using test::DeviceBuf;
using namespace test::fakedev;

class Spaces : public ::testing::TestWithParam<int> {};

TEST_P(Spaces, AllReduceEveryAlgorithmOverDeviceMemoryEqualsHost) {
  for (const char* algo : {"AUTO", "RING", "TREE"}) {
    SCOPED_TRACE(algo);
    runMatrix(GetParam(), algo, {Coll::AllReduce});
  }
}

TEST_P(Spaces, EveryOtherCollectiveOverDeviceMemoryEqualsHost) {
  runMatrix(GetParam(), "AUTO", test::kAllButAllReduce);
}

TEST_P(Spaces, GatherScatterAndPerRankCountsOverDeviceMemoryEqualHost) {
  runMatrix(GetParam(), "AUTO", test::kGatherScatterV);
}

INSTANTIATE_TEST_SUITE_P(Ranks, Spaces, ::testing::Values(1, 2, 3, 4, 5));

// Memory the CPU may not touch (a GPU's) crosses the host transports through host memory (Note [Staging device
// memory] in lib/comm/comm.cc). The fake device then gives every block its own key, so a byte that a transport, an
// algorithm or the staging moved without the plugin would come out wrong.
struct HostInaccessible {
  HostInaccessible() { fake().setHostAccessible(0); }
  ~HostInaccessible() { fake().setHostAccessible(1); }
};
// Ranks of one host would move it device to device (test_device_ipc); staging is what the others use.
struct NoDeviceIpc {
  NoDeviceIpc() { env.set("CHORUS_DEVICE_IPC", "0"); }
  test::EnvGuard env;
};

class Staged : public ::testing::TestWithParam<int> {};

TEST_P(Staged, DeviceMemoryTheCpuMayNotTouchGoesThroughHostMemoryAndEqualsHost) {
  useDevice(0);
  HostInaccessible inaccessible;
  NoDeviceIpc staged;
  const long copiesBefore = fake().copiesStarted(), pinnedBefore = fake().hostAllocations();
  for (const char* algo : {"AUTO", "RING", "TREE"}) {
    SCOPED_TRACE(algo);
    runMatrix(GetParam(), algo, {Coll::AllReduce});
  }
  runMatrix(GetParam(), "AUTO", test::kAllButAllReduce);
  if (GetParam() > 1) {
    const long copies = fake().copiesStarted() - copiesBefore, pinned = fake().hostAllocations() - pinnedBefore;
    EXPECT_GT(copies, 0) << "no staging copy ran on the device";
    // Bounce buffers come from the device's pinned memory and are reused: far fewer allocations than copies.
    EXPECT_GT(pinned, 0) << "no bounce buffer came from the device's host memory";
    EXPECT_LT(pinned * 20, copies) << pinned << " pinned allocations for " << copies << " copies";
  }
}

// Copies that take a while (200 us each, on the device's own thread) while the host goes on: each message still
// reaches the transport, and the algorithm, in order, and every result equals host memory's.
TEST_P(Staged, SlowDeviceCopiesOverlapTheTransportAndKeepOrder) {
  useDevice(0);
  HostInaccessible inaccessible;
  NoDeviceIpc staged;
  fake().setCopyDelayUs(200);
  setenv("CHORUS_TEST_MATRIX", "small", 1);
  runMatrix(GetParam(), "RING", {Coll::AllReduce});
  runMatrix(GetParam(), "AUTO", {Coll::AllGather, Coll::AllToAll, Coll::SendRecv, Coll::Broadcast});
  unsetenv("CHORUS_TEST_MATRIX");
  fake().setCopyDelayUs(0);
}

INSTANTIATE_TEST_SUITE_P(Ranks, Staged, ::testing::Values(1, 2, 3, 4));

// The API's answer to buffers outside the communicator's memory, and that the communicator stays usable.
TEST(SpaceArguments, BuffersOutsideTheCommunicatorsMemoryAreRefusedNamingThem) {
  useDevice(0);
  auto errors = runRanks(2, [&](int r, chorusComm_t& comm) {
    DeviceBuf a(dev(0), 64), b(dev(0), 64), other(dev(1), 64);
    std::vector<float> host(16, 1.0f), hostOut(16);
    auto expectRefused = [&](chorusResult_t rc, std::initializer_list<const char*> words) {
      EXPECT_EQ(rc, chorusInvalidArgument);
      std::string text = chorusGetLastError(comm);
      for (const char* w : words) EXPECT_NE(text.find(w), std::string::npos) << "'" << w << "' not in: " << text;
    };
    expectRefused(chorusAllReduce(host.data(), b.data(), 16, chorusFloat32, chorusSum, comm, nullptr),
                  {"sendbuff", "host memory", "recvbuff", "fake:0", "one memory space"});
    expectRefused(chorusAllReduce(other.data(), other.data(), 16, chorusFloat32, chorusSum, comm, nullptr),
                  {"sendbuff", "fake:1", "works on fake:0"});
    expectRefused(chorusSend(other.data(), 16, chorusFloat32, 1 - r, comm, nullptr), {"sendbuff", "fake:1"});
    // Host buffers are fine on a device's communicator, and so are its own device's; it is still usable.
    check(chorusAllReduce(host.data(), hostOut.data(), 16, chorusFloat32, chorusSum, comm, nullptr), comm, "host");
    EXPECT_EQ(hostOut[3], 2.0f);
    check(chorusAllReduce(a.data(), b.data(), 16, chorusFloat32, chorusSum, comm, nullptr), comm, "device");
  });
  for (const auto& e : errors) ADD_FAILURE() << e;
}

// Where a device runtime is loaded, a pointer it does not know and the CPU cannot read (a freed device buffer, an
// unmapped page) is refused naming the argument, not read; a call that moves nothing never looks at its buffers.
TEST(SpaceArguments, AnUnreadablePointerIsRefusedNotRead) {
  useDevice(0);
  // Reserved and inaccessible, as CUDA leaves the address range of a freed buffer (an unmapped page could be
  // mapped again by the ranks' threads meanwhile).
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* gone = mmap(nullptr, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(gone, MAP_FAILED);
  auto errors = runRanks(2, [&](int r, chorusComm_t& comm) {
    std::vector<float> host(16, 1.0f);
    EXPECT_EQ(chorusAllReduce(gone, host.data(), 16, chorusFloat32, chorusSum, comm, nullptr), chorusInvalidArgument);
    std::string text = chorusGetLastError(comm);
    for (const char* w : {"sendbuff", "neither host memory this process can read", "fake device"})
      EXPECT_NE(text.find(w), std::string::npos) << "'" << w << "' not in: " << text;
    EXPECT_EQ(chorusRecv(gone, 4, chorusUint8, 1 - r, comm, nullptr), chorusInvalidArgument);
    EXPECT_NE(std::string(chorusGetLastError(comm)).find("recvbuff"), std::string::npos) << chorusGetLastError(comm);
    check(chorusAllReduce(gone, gone, 0, chorusFloat32, chorusSum, comm, nullptr), comm, "a call of 0 elements");
    check(chorusAllReduce(host.data(), host.data(), 16, chorusFloat32, chorusSum, comm, nullptr), comm, "host");
    EXPECT_EQ(host[9], 2.0f);
  });
  munmap(gone, page);
  for (const auto& e : errors) ADD_FAILURE() << e;
}

TEST(SpaceArguments, AHostOnlyCommunicatorRefusesDeviceBuffers) {
  useDevice(-1);  // a device runtime, but no device current when the communicators are created
  auto errors = runRanks(2, [&](int, chorusComm_t& comm) {
    DeviceBuf a(dev(0), 64);
    EXPECT_EQ(chorusAllReduce(a.data(), a.data(), 16, chorusFloat32, chorusSum, comm, nullptr), chorusInvalidArgument);
    std::string text = chorusGetLastError(comm);
    EXPECT_NE(text.find("sendbuff"), std::string::npos) << text;
    EXPECT_NE(text.find("host memory only"), std::string::npos) << text;
  });
  for (const auto& e : errors) ADD_FAILURE() << e;
}

// A device error inside a collective (an allocation of device scratch fails on one rank): that rank gets the
// runtime's code and text, its peer an error too, both within the bound of a failed peer; nobody hangs.
TEST(SpaceErrors, ADeviceErrorInsideACollectiveFailsItOnEveryRank) {
  useDevice(0);
  std::vector<chorusResult_t> rc(2, chorusSuccess);
  std::vector<std::string> text(2);
  std::vector<double> seconds(2);
  fake().failAllocations(1);  // the next allocation Chorus asks for fails: the first device scratch of either rank
  auto errors = runRanks(2, [&](int r, chorusComm_t& comm) {
    DeviceBuf a(dev(0), 4096);
    const auto t0 = std::chrono::steady_clock::now();
    rc[r] = chorusAllReduce(a.data(), a.data(), 1024, chorusFloat32, chorusSum, comm, nullptr);
    seconds[r] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    text[r] = chorusGetLastError(comm);
  });
  fake().failAllocations(0);
  for (const auto& e : errors) ADD_FAILURE() << e;
  int injected = -1;  // the rank whose allocation failed: its own text names it, the runtime and the error
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(rc[r], chorusSuccess) << "rank " << r;
    EXPECT_LT(seconds[r], 5.0) << "rank " << r << ": " << text[r];
    if (rc[r] == chorusUnhandledCudaError && text[r].rfind("rank " + std::to_string(r) + " ", 0) == 0 &&
        text[r].find("fake:0: allocating") != std::string::npos &&
        text[r].find("out of memory (injected by the test)") != std::string::npos)
      injected = r;
  }
  ASSERT_NE(injected, -1) << text[0] << "\n" << text[1];
  // Its peer's names the rank that failed.
  EXPECT_NE(text[1 - injected].find("rank " + std::to_string(injected)), std::string::npos) << text[1 - injected];
}

// chorusMemAlloc gives the current device's memory, which calls take as any device buffer; chorusMemFree frees it
// and refuses host memory; without a current device the allocation is refused.
TEST(MemAlloc, GivesTheCurrentDevicesMemoryAndFreesIt) {
  useDevice(0);
  auto errors = runRanks(2, [&](int r, chorusComm_t& comm) {
    void* p = nullptr;
    check(chorusMemAlloc(&p, 64 * sizeof(float)), comm, "chorusMemAlloc");
    ASSERT_NE(p, nullptr);
    std::vector<float> host(64, static_cast<float>(r + 1)), out(64);
    fake().table->copy(0, p, host.data(), 64 * sizeof(float));
    check(chorusAllReduce(p, p, 64, chorusFloat32, chorusSum, comm, nullptr), comm, "AllReduce over chorusMemAlloc's");
    fake().table->copy(0, out.data(), p, 64 * sizeof(float));
    EXPECT_EQ(out[17], 3.0f);
    check(chorusMemFree(p), comm, "chorusMemFree");
    EXPECT_EQ(chorusMemFree(host.data()), chorusInvalidArgument);
    EXPECT_NE(std::string(chorusGetLastError(nullptr)).find("not device memory"), std::string::npos);
    EXPECT_EQ(chorusMemAlloc(&p, 0), chorusSuccess);
    EXPECT_EQ(p, nullptr);
    EXPECT_EQ(chorusMemAlloc(nullptr, 8), chorusInvalidArgument);
  });
  for (const auto& e : errors) ADD_FAILURE() << e;
  useDevice(-1);
  void* p = nullptr;
  EXPECT_EQ(chorusMemAlloc(&p, 64), chorusInvalidUsage);
  EXPECT_NE(std::string(chorusGetLastError(nullptr)).find("no current device"), std::string::npos)
      << chorusGetLastError(nullptr);
  useDevice(0);
}

// ---- Device streams (Note [Device streams] in lib/comm/stream.cc), over the fake device's streams ----

// A "kernel" for a fake device stream: any host function, run by the stream's thread in queue order.
void launch(void* stream, std::function<void()> fn) {
  auto* f = new std::function<void()>(std::move(fn));
  fake().streamLaunch(stream, [](void* p) {
    auto* g = static_cast<std::function<void()>*>(p);
    (*g)();
    delete g;
  }, f);
}

// Holds a kernel until the test opens it (or 20 s pass, so that a call that wrongly blocks fails the test rather
// than hanging it).
class Gate {
 public:
  void open() {
    std::lock_guard<std::mutex> g(mu_);
    open_ = true;
    cv_.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> g(mu_);
    cv_.wait_for(g, std::chrono::seconds(20), [&] { return open_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

// A fake device stream and the chorusStream that follows it, for one rank.
struct Streams {
  explicit Streams(chorusComm_t comm) : device(fake().streamCreate(0)) {
    check(chorusStreamCreateFromCuda(comm, device, &stream), comm, "chorusStreamCreateFromCuda");
  }
  ~Streams() {
    chorusStreamDestroy(stream);
    fake().streamDestroy(device);
  }
  void* device;
  chorusStream_t stream = nullptr;
};

// NCCL's contract, on every rank: the collective starts after the kernel queued before it (which writes its input
// and is held until the call has returned), the kernel queued after it (which reads its output) waits for it, and
// the calling thread does not block. Three rounds on one stream, so fences follow one another.
class DeviceStreamOrder : public ::testing::TestWithParam<int> {};

TEST_P(DeviceStreamOrder, ACollectiveFollowsItsCudaStreamWithoutBlockingTheCaller) {
  useDevice(0);
  const int n = GetParam();
  constexpr size_t kCount = 1031;
  const long fencesBefore = fake().fences(), openBefore = fake().openStreams();
  auto errors = runRanks(n, [&](int r, chorusComm_t& comm) {
    Streams st(comm);
    DeviceBuf in(dev(0), kCount * 4), out(dev(0), kCount * 4);
    for (int round = 0; round < 3; ++round) {
      SCOPED_TRACE("round " + std::to_string(round));
      in.upload(std::vector<uint8_t>(kCount * 4, 0));
      out.upload(std::vector<uint8_t>(kCount * 4, 0xC3));
      std::vector<float> input(kCount);
      for (size_t i = 0; i < kCount; ++i) input[i] = static_cast<float>(r + 1 + (i + round) % 7);
      Gate gate;
      std::atomic<bool> written{false};
      launch(st.device, [&] {
        gate.wait();
        std::vector<uint8_t> bytes(kCount * 4);
        std::memcpy(bytes.data(), input.data(), bytes.size());
        in.upload(bytes);
        written = true;
      });
      check(chorusAllReduce(in.data(), out.data(), kCount, chorusFloat32, chorusSum, comm, st.stream), comm,
            "AllReduce on the device stream");
      EXPECT_FALSE(written.load()) << "the call waited for the kernel queued before it";
      std::vector<uint8_t> seen;
      launch(st.device, [&] { seen = out.download(); });
      EXPECT_EQ(chorusStreamQuery(st.stream), chorusInProgress);
      gate.open();
      check(chorusStreamSynchronize(st.stream), comm, "chorusStreamSynchronize");
      ASSERT_EQ(seen.size(), kCount * 4) << "the kernel after the collective had not run when Synchronize returned";
      std::vector<float> got(kCount);
      std::memcpy(got.data(), seen.data(), seen.size());
      for (size_t i = 0; i < kCount; ++i) {
        float want = 0;
        for (int q = 0; q < n; ++q) want += static_cast<float>(q + 1 + (i + round) % 7);
        ASSERT_EQ(got[i], want) << "element " << i << " as the kernel after the collective saw it";
      }
    }
  });
  for (const auto& e : errors) ADD_FAILURE() << e;
  EXPECT_EQ(fake().fences() - fencesBefore, 3L * n);
  EXPECT_EQ(fake().openStreams(), openBefore) << "chorusStreamDestroy left a device stream open";
}

INSTANTIATE_TEST_SUITE_P(Ranks, DeviceStreamOrder, ::testing::Values(1, 2, 3));

// Host functions on such a stream follow it too, and a group of calls on it (Send/Recv) takes one fence.
TEST(DeviceStreams, HostFunctionsAndGroupsFollowTheDeviceStream) {
  useDevice(0);
  auto errors = runRanks(2, [&](int r, chorusComm_t& comm) {
    Streams st(comm);
    Gate gate;
    std::atomic<bool> kernelDone{false}, fnRan{false}, fnSawKernel{false};
    launch(st.device, [&] {
      gate.wait();
      kernelDone = true;
    });
    struct Flags {
      std::atomic<bool>*ran, *sawKernel, *kernelDone;
    } flags{&fnRan, &fnSawKernel, &kernelDone};
    check(chorusLaunchHostFunc(st.stream, [](void* p) {
      auto* f = static_cast<Flags*>(p);
      *f->sawKernel = f->kernelDone->load();
      *f->ran = true;
    }, &flags), comm, "chorusLaunchHostFunc");
    DeviceBuf send(dev(0), 64), recv(dev(0), 64);
    send.upload(std::vector<uint8_t>(64, static_cast<uint8_t>(10 + r)));
    const long fencesBefore = fake().fences();
    chorusGroupStart();
    chorusSend(send.data(), 64, chorusUint8, 1 - r, comm, st.stream);
    chorusRecv(recv.data(), 64, chorusUint8, 1 - r, comm, st.stream);
    check(chorusGroupEnd(), comm, "GroupEnd of calls on the device stream");
    EXPECT_GE(fake().fences() - fencesBefore, 1);
    EXPECT_FALSE(fnRan.load()) << "the host function ran before the kernel queued before it";
    gate.open();
    check(chorusStreamSynchronize(st.stream), comm, "chorusStreamSynchronize");
    EXPECT_TRUE(fnRan.load());
    EXPECT_TRUE(fnSawKernel.load()) << "the host function ran before the kernel queued before it had finished";
    EXPECT_EQ(recv.download(), std::vector<uint8_t>(64, static_cast<uint8_t>(10 + (1 - r))));
  });
  for (const auto& e : errors) ADD_FAILURE() << e;
}

TEST(DeviceStreams, AStreamOfAnotherDeviceOrWithoutOneIsRefusedNamingIt) {
  useDevice(0);
  auto errors = runRanks(1, [&](int, chorusComm_t& comm) {
    void* other = fake().streamCreate(1);
    chorusStream_t s = nullptr;
    EXPECT_EQ(chorusStreamCreateFromCuda(comm, other, &s), chorusInvalidArgument);
    std::string text = chorusGetLastError(comm);
    for (const char* w : {"cudaStream", "fake:1", "works on fake:0"})
      EXPECT_NE(text.find(w), std::string::npos) << "'" << w << "' not in: " << text;
    EXPECT_EQ(s, nullptr);
    EXPECT_EQ(chorusStreamCreateFromCuda(comm, nullptr, &s), chorusSuccess)  // the default stream, as in CUDA
        << chorusGetLastError(comm);
    EXPECT_EQ(chorusStreamDestroy(s), chorusSuccess);
    EXPECT_EQ(chorusStreamCreateFromCuda(comm, other, nullptr), chorusInvalidArgument);
    fake().streamDestroy(other);
  });
  for (const auto& e : errors) ADD_FAILURE() << e;
  useDevice(-1);
  errors = runRanks(1, [&](int, chorusComm_t& comm) {
    void* ds = fake().streamCreate(0);
    chorusStream_t s = nullptr;
    EXPECT_EQ(chorusStreamCreateFromCuda(comm, ds, &s), chorusInvalidArgument);
    EXPECT_NE(std::string(chorusGetLastError(comm)).find("host memory only"), std::string::npos)
        << chorusGetLastError(comm);
    EXPECT_EQ(chorusStreamCreateFromCuda(comm, nullptr, &s), chorusUnhandledCudaError);  // the runtime's refusal
    EXPECT_NE(std::string(chorusGetLastError(comm)).find("no default stream"), std::string::npos)
        << chorusGetLastError(comm);
    fake().streamDestroy(ds);
  });
  for (const auto& e : errors) ADD_FAILURE() << e;
}

// NCCL's stream 0 (Note [The default stream] in lib/comm/stream.cc): a blocking call on device memory starts after
// the kernel queued on the device's default stream before it, which writes its input (and is held until a thread
// of the test lets it go, after the call has begun).
TEST(DeviceStreams, ABlockingCallOnDeviceMemoryFollowsTheDefaultStream) {
  useDevice(0);
  test::Watchdog watchdog(60);
  constexpr size_t kCount = 257;
  auto errors = runRanks(2, [&](int r, chorusComm_t& comm) {
    DeviceBuf buf(dev(0), kCount * 4);
    buf.upload(std::vector<uint8_t>(kCount * 4, 0));
    std::vector<float> input(kCount, static_cast<float>(r + 1));
    Gate gate;
    launch(fake().defaultStream(0), [&] {
      gate.wait();
      std::vector<uint8_t> bytes(kCount * 4);
      std::memcpy(bytes.data(), input.data(), bytes.size());
      buf.upload(bytes);
    });
    std::thread opener([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      gate.open();
    });
    const chorusResult_t rc = chorusAllReduce(buf.data(), buf.data(), kCount, chorusFloat32, chorusSum, comm, nullptr);
    opener.join();
    check(rc, comm, "blocking AllReduce on device memory");
    std::vector<uint8_t> seen = buf.download();
    std::vector<float> got(kCount);
    std::memcpy(got.data(), seen.data(), seen.size());
    for (size_t i = 0; i < kCount; ++i) ASSERT_EQ(got[i], 3.0f) << "element " << i;
  });
  for (const auto& e : errors) ADD_FAILURE() << e;
}

// DDP's first step grows its bucket from 1 to 25 MiB: a call on a device stream whose scratch must grow frees the
// smaller scratch while its own fence holds the stream. The fake device's frees wait for every stream of the device,
// as cudaFree does, so a free made then would wait for the very call that makes it (Note [Frees wait for quiet] in
// transports/plugin_memory.cc). Each call finishes with the right result, and the frees still happen.
TEST(DeviceStreams, GrowingScratchWhileTheStreamIsHeldDoesNotHang) {
  useDevice(0);
  test::Watchdog watchdog(60);
  constexpr size_t kLarge = size_t(1) << 16;
  const long syncsBefore = fake().deviceSyncs();
  auto errors = runRanks(2, [&](int r, chorusComm_t& comm) {
    Streams st(comm);
    DeviceBuf buf(dev(0), kLarge * 4);
    for (size_t count : {size_t(8), size_t(1000), kLarge}) {
      SCOPED_TRACE("count " + std::to_string(count));
      std::vector<float> v(kLarge, static_cast<float>(r + 1));
      std::vector<uint8_t> bytes(kLarge * 4);
      std::memcpy(bytes.data(), v.data(), bytes.size());
      buf.upload(bytes);
      check(chorusAllReduce(buf.data(), buf.data(), count, chorusFloat32, chorusSum, comm, st.stream), comm,
            "AllReduce on the device stream");
      check(chorusStreamSynchronize(st.stream), comm, "chorusStreamSynchronize");
      bytes = buf.download();
      std::memcpy(v.data(), bytes.data(), bytes.size());
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(v[i], 3.0f) << "element " << i;
    }
  });
  for (const auto& e : errors) ADD_FAILURE() << e;
  EXPECT_GT(fake().deviceSyncs(), syncsBefore) << "no free of Chorus's waited for the device: nothing grew";
}

// Note [Scratch before the fence] in lib/comm/scratch_plan.cc: with the fake's allocations waiting for every stream of
// the device, as its frees do, a call on a device stream whose scratch grew in the middle of the call would wait for
// its own fence: the process hung before (the watchdog). Every algorithm and the PreMulSum pass, at sizes that grow
// each slot, through device IPC; each rank on a device of its own (ranks that share one as threads of one process
// would wait for each other's fences, which Chorus does not cover). Staged: the devices cannot reach each other and
// the CPU may not touch their memory, so every message goes through pinned host buffers (StagingPool), whose
// allocations wait for the device too.
void growOnHeldStreams(const char* algo, bool staged) {
  useDevice(0);
  test::Watchdog watchdog(120);
  test::EnvGuard env;
  env.set("CHORUS_ALGO", algo);
  std::optional<HostInaccessible> inaccessible;
  if (staged) inaccessible.emplace();
  fake().setPeerAccess(staged ? 0 : 1);
  const long allocationsBefore = fake().allocations(), pinnedBefore = fake().hostAllocations();
  auto errors = runRanks(2, [&](int r, chorusComm_t& comm) {
    fake().setThreadCurrent(r);
    chorusComm_t onDevice = nullptr;
    check(chorusCommSplit(comm, 0, r, &onDevice, nullptr), comm, "chorusCommSplit on device " + std::to_string(r));
    void* native = fake().streamCreate(r);
    chorusStream_t stream = nullptr;
    check(chorusStreamCreateFromCuda(onDevice, native, &stream), onDevice, "chorusStreamCreateFromCuda");
    check(chorusBarrier(comm, nullptr), comm, "barrier");
    if (r == 0) fake().setAllocationsSynchronize(1);
    check(chorusBarrier(comm, nullptr), comm, "barrier");
    for (size_t count : {size_t(8), size_t(1000), size_t(1) << 16, size_t(1) << 19}) {
      SCOPED_TRACE("count " + std::to_string(count));
      const auto mine = static_cast<float>(r + 1);
      DeviceBuf sum(dev(r), count * 4), half(dev(r), count * 2), scattered(dev(r), count * 4),
          gathered(dev(r), count * 8), reduced(dev(r), count * 4);
      uploadValues(sum, std::vector<float>(count, mine));
      uploadValues(half, std::vector<uint16_t>(count, r == 0 ? 0x3C00 : 0x4000));  // float16 1 and 2
      uploadValues(gathered, std::vector<float>(2 * count, mine));
      check(chorusAllReduce(sum.data(), sum.data(), count, chorusFloat32, chorusSum, onDevice, stream), onDevice,
            "AllReduce");
      check(chorusAllReduce(half.data(), half.data(), count, chorusFloat16, chorusAvg, onDevice, stream), onDevice,
            "AllReduce Avg of float16 (pre-multiplied)");
      check(chorusReduceScatter(gathered.data(), scattered.data(), count, chorusFloat32, chorusSum, onDevice,
                                stream), onDevice, "ReduceScatter");
      check(chorusReduce(sum.data(), reduced.data(), count, chorusFloat32, chorusSum, 0, onDevice, stream),
            onDevice, "Reduce");
      check(chorusAllGather(scattered.data(), gathered.data(), count, chorusFloat32, onDevice, stream), onDevice,
            "AllGather");
      check(chorusStreamSynchronize(stream), onDevice, "chorusStreamSynchronize");
      EXPECT_EQ(downloadValues<float>(sum, count), std::vector<float>(count, 3.0f));
      EXPECT_EQ(downloadValues<uint16_t>(half, count), std::vector<uint16_t>(count, 0x3E00));  // 1.5
      EXPECT_EQ(downloadValues<float>(gathered, 2 * count), std::vector<float>(2 * count, 3.0f));
      if (r == 0) {
        EXPECT_EQ(downloadValues<float>(reduced, count), std::vector<float>(count, 6.0f));
      }
    }
    check(chorusBarrier(comm, nullptr), comm, "barrier");
    if (r == 0) fake().setAllocationsSynchronize(0);
    check(chorusStreamDestroy(stream), onDevice, "chorusStreamDestroy");
    fake().streamDestroy(native);
    check(chorusCommDestroy(onDevice), comm, "chorusCommDestroy");
    fake().setThreadCurrent(-1);
  });
  fake().setPeerAccess(1);
  for (const auto& e : errors) ADD_FAILURE() << e;
  EXPECT_GT(fake().allocations(), allocationsBefore) << "no scratch was allocated: nothing grew";
  if (staged) {
    EXPECT_GT(fake().hostAllocations(), pinnedBefore) << "nothing was staged";
  }
}

class ScratchBeforeTheFence : public ::testing::TestWithParam<const char*> {};

TEST_P(ScratchBeforeTheFence, CallsOnAHeldStreamAllocateNothingWhileTheyRun) { growOnHeldStreams(GetParam(), false); }
TEST_P(ScratchBeforeTheFence, StagedCallsOnAHeldStreamAllocateNothingWhileTheyRun) {
  growOnHeldStreams(GetParam(), true);
}

INSTANTIATE_TEST_SUITE_P(Algorithms, ScratchBeforeTheFence, ::testing::Values("RING", "TREE", "AUTO"));

// Another communicator's frees wait too: one is destroyed (freeing its device scratch) while a call of another
// holds the device stream behind a kernel that has not run yet. The destroy returns at once rather than after the
// kernel (which waits for the test, up to 20 s), and the free happens once the stream is released.
TEST(DeviceStreams, DestroyingACommunicatorWhileAnotherHoldsTheStreamDoesNotWaitForIt) {
  useDevice(0);
  test::Watchdog watchdog(60);
  constexpr size_t kCount = 4096;
  const long syncsBefore = fake().deviceSyncs();
  std::vector<double> destroySeconds(2);
  auto errors = runRanks(2, [&](int r, chorusComm_t& comm) {
    chorusComm_t other = nullptr;
    check(chorusCommSplit(comm, 0, r, &other, nullptr), comm, "chorusCommSplit");
    DeviceBuf buf(dev(0), kCount * 4);
    check(chorusAllReduce(buf.data(), buf.data(), kCount, chorusFloat32, chorusSum, other, nullptr), other,
          "AllReduce on the other communicator (its device scratch)");
    Streams st(comm);
    Gate gate;
    launch(st.device, [&] { gate.wait(); });
    check(chorusAllReduce(buf.data(), buf.data(), kCount, chorusFloat32, chorusSum, comm, st.stream), comm,
          "AllReduce on the device stream, behind the held kernel");
    const auto t0 = std::chrono::steady_clock::now();
    check(chorusCommDestroy(other), comm, "chorusCommDestroy of the other communicator");
    destroySeconds[r] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    gate.open();
    check(chorusStreamSynchronize(st.stream), comm, "chorusStreamSynchronize");
  });
  for (const auto& e : errors) ADD_FAILURE() << e;
  for (int r = 0; r < 2; ++r)
    EXPECT_LT(destroySeconds[r], 5.0) << "rank " << r << ": the destroy waited for the held device stream";
  EXPECT_GT(fake().deviceSyncs(), syncsBefore) << "the destroyed communicator's device scratch was never freed";
}

// A stream being captured into a CUDA graph refuses the fence (a graph would replay the wait without Chorus to
// release it): the call fails at once with chorusInvalidUsage and the runtime's words, queues nothing, holds
// nothing, and the communicator goes on once the capture has ended.
TEST(DeviceStreams, ACallOnACapturingStreamIsRefusedAndTheCommunicatorGoesOn) {
  useDevice(0);
  test::Watchdog watchdog(60);
  auto errors = runRanks(2, [&](int r, chorusComm_t& comm) {
    Streams st(comm);
    DeviceBuf buf(dev(0), 64 * 4);
    fake().streamCapture(st.device, 1);
    const long fencesBefore = fake().fences();
    EXPECT_EQ(chorusAllReduce(buf.data(), buf.data(), 64, chorusFloat32, chorusSum, comm, st.stream),
              chorusInvalidUsage);
    const std::string text = chorusGetLastError(comm);
    EXPECT_NE(text.find("captured into a graph"), std::string::npos) << text;
    EXPECT_NE(text.find("fake:0"), std::string::npos) << text;
    fake().streamCapture(st.device, 0);
    std::vector<float> v(64, static_cast<float>(r + 1));
    std::vector<uint8_t> bytes(v.size() * 4);
    std::memcpy(bytes.data(), v.data(), bytes.size());
    buf.upload(bytes);
    check(chorusAllReduce(buf.data(), buf.data(), 64, chorusFloat32, chorusSum, comm, st.stream), comm,
          "AllReduce after the capture ended");
    check(chorusStreamSynchronize(st.stream), comm, "chorusStreamSynchronize");
    bytes = buf.download();
    std::memcpy(v.data(), bytes.data(), bytes.size());
    EXPECT_EQ(v[7], 3.0f);
    EXPECT_GE(fake().fences() - fencesBefore, 1);
  });
  for (const auto& e : errors) ADD_FAILURE() << e;
}

// A failure inside the collective (device scratch allocation fails on one rank) and a failed kernel queued before
// it (on rank 0): every rank's stream reports an error, the device stream is released all the same (the kernel
// after the collective runs), the communicator says it failed, and nobody hangs.
TEST(DeviceStreams, AFailureReachesTheStreamAndReleasesTheDeviceStream) {
  for (const bool kernelFails : {false, true}) {
    SCOPED_TRACE(kernelFails ? "a kernel before the collective fails" : "the collective fails");
    useDevice(0);
    std::vector<std::string> text(2);
    std::vector<chorusResult_t> rc(2, chorusSuccess), async(2, chorusSuccess);
    if (!kernelFails) fake().failAllocations(1);
    auto errors = runRanks(2, [&](int r, chorusComm_t& comm) {
      Streams st(comm);
      DeviceBuf a(dev(0), 4096);
      if (kernelFails && r == 0) fake().streamFail(st.device);
      check(chorusAllReduce(a.data(), a.data(), 1024, chorusFloat32, chorusSum, comm, st.stream), comm,
            "AllReduce on the device stream (it fails later)");
      std::atomic<bool> after{false};
      launch(st.device, [&] { after = true; });
      rc[r] = chorusStreamSynchronize(st.stream);
      text[r] = chorusGetLastError(nullptr);
      EXPECT_TRUE(after.load()) << "the device stream stayed held after the collective failed";
      chorusCommGetAsyncError(comm, &async[r]);
    });
    fake().failAllocations(0);
    for (const auto& e : errors) ADD_FAILURE() << e;
    for (int r = 0; r < 2; ++r) {
      EXPECT_NE(rc[r], chorusSuccess) << "rank " << r;
      EXPECT_NE(async[r], chorusSuccess) << "rank " << r;
    }
    const std::string want = kernelFails ? "a kernel on the stream failed" : "out of memory (injected by the test)";
    EXPECT_TRUE(text[0].find(want) != std::string::npos || text[1].find(want) != std::string::npos)
        << text[0] << "\n" << text[1];
    if (kernelFails) {
      EXPECT_EQ(rc[0], chorusUnhandledCudaError) << text[0];
      EXPECT_NE(text[1].find("rank 0"), std::string::npos) << text[1];
    }
  }
}

// chorus_info lists the device runtimes it found: the fake one registered, one of a later version and one whose
// table is shorter than this libchorus's refused.
TEST(MemoryPlugins, ChorusInfoListsDeviceRuntimesAndRefusesOtherVersions) {
  const std::string dir = test::buildDir() + "/test/fixtures/memory";
  test::RunResult r = test::runShell("CHORUS_PLUGIN_PATH=" + dir + " " + test::buildDir() + "/scripts/chorus_info");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("memory: host (built in)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("fake from " + dir + "/libchorus-fakedev.so: registered"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("libchorus-memfuture.so is a memory plugin of version 5; this libchorus speaks version 4"),
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("libchorus-memshort.so: its chorusMemoryPlugin_v4 is 16 bytes, this libchorus's is"),
            std::string::npos) << r.output;
}

// The CUDA plugin, where nvcc built it: it alone needs libcudart, and chorus_info says what became of it: registered
// with a GPU, or not available with CUDA's own words (this machine: no driver).
TEST(CudaPlugin, SaysWhetherItRunsAndAloneNeedsTheCudaRuntime) {
  const std::string plugin = test::buildDir() + "/transports/cuda_ipc/libchorus-cuda_ipc.so";
  if (test::runShell("test -f " + plugin).status != 0) GTEST_SKIP() << "the CUDA plugin is not built (no nvcc found)";
  test::RunResult r = test::runShell("readelf -d " + plugin);
  EXPECT_NE(r.output.find("libcudart"), std::string::npos) << r.output;
  r = test::runShell(test::buildDir() + "/scripts/chorus_info");
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string line = "cuda from " + plugin + ": ";
  const size_t at = r.output.find(line);
  ASSERT_NE(at, std::string::npos) << r.output;
  const std::string state = r.output.substr(at + line.size(), r.output.find('\n', at) - at - line.size());
  if (test::runShell("test -e /dev/nvidiactl").status == 0) {
    EXPECT_TRUE(state == "registered" || state.rfind("not available: ", 0) == 0) << state;
  } else {
    EXPECT_EQ(state.rfind("not available: ", 0), 0u) << state;  // CUDA's text follows, e.g. "CUDA driver version
    EXPECT_GT(state.size(), std::string("not available: ").size()) << state;  // is insufficient ..."
  }
}

}  // namespace
