// The memory-space seam (Note [Memory spaces], lib/mem/space.h), with a fake device whose memory holds every
// byte XOR kKey. Bytes moved as they are stay right there, but a reduction or an Avg scale done on that memory
// other than through the device gives wrong values, and so does a copy between it and host memory. So every
// collective, run over that device's buffers and compared bit for bit with the same call over host memory (which
// test_collectives checks against its reference), shows that the algorithms did their data work through the
// call's Space. Also: which buffers the API accepts, and with which error it refuses the others.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "lib/kernels/reduce.h"
#include "lib/mem/space.h"
#include "test/ranks.h"
#include "test/reference.h"

namespace {

using namespace chorus;
using test::check;
using test::runRanks;

constexpr uint8_t kKey = 0x5A;

class FakeDevice;

// Which fake device owns an address: a map of allocations, and the device a new communicator binds to.
class FakeRuntime final : public mem::Classifier {
 public:
  mem::Device* deviceOf(const void* p) override;
  mem::Device* current() override;
  FakeDevice* owner(const void* p);
  void add(const void* p, size_t bytes, FakeDevice* d) {
    std::lock_guard<std::mutex> g(mu_);
    blocks_[reinterpret_cast<uintptr_t>(p)] = {bytes, d};
  }
  void remove(const void* p) {
    std::lock_guard<std::mutex> g(mu_);
    blocks_.erase(reinterpret_cast<uintptr_t>(p));
  }
  std::atomic<FakeDevice*> current_{nullptr};

 private:
  std::mutex mu_;
  std::map<uintptr_t, std::pair<size_t, FakeDevice*>> blocks_;
};
FakeRuntime gRuntime;

std::vector<uint8_t> flip(const void* p, size_t bytes) {
  std::vector<uint8_t> v(bytes);
  if (bytes > 0) std::memcpy(v.data(), p, bytes);
  for (uint8_t& b : v) b ^= kKey;
  return v;
}

class FakeDevice final : public mem::Device {
 public:
  explicit FakeDevice(int id) : name_("fake:" + std::to_string(id)) {}
  const char* name() const override { return name_.c_str(); }
  void copy(void* dst, const void* src, size_t bytes) override {
    ++copies;
    if ((gRuntime.owner(dst) == this) == (gRuntime.owner(src) == this)) {
      std::memmove(dst, src, bytes);
      return;
    }
    std::vector<uint8_t> v = flip(src, bytes);  // between host memory and this device's
    std::memcpy(dst, v.data(), bytes);
  }
  void reduce(void* dst, const void* a, const void* b, size_t count, chorusDataType_t dt,
              chorusRedOp_t op) override {
    ++reduces;
    const size_t bytes = count * kernels::dataTypeSize(dt);
    std::vector<uint8_t> x = flip(a, bytes), y = flip(b, bytes);
    kernels::reduce(x.data(), x.data(), y.data(), count, dt, op);
    store(dst, x);
  }
  void reduceN(void* dst, const void* const* srcs, int n, size_t count, chorusDataType_t dt,
               chorusRedOp_t op) override {
    ++reduces;
    const size_t bytes = count * kernels::dataTypeSize(dt);
    std::vector<uint8_t> acc = flip(srcs[0], bytes);
    for (int i = 1; i < n; ++i) {
      std::vector<uint8_t> y = flip(srcs[i], bytes);
      kernels::reduce(acc.data(), acc.data(), y.data(), count, dt, op);
    }
    store(dst, acc);
  }
  void scaleDivide(void* buf, size_t count, chorusDataType_t dt, int divisor) override {
    ++scales;
    std::vector<uint8_t> x = flip(buf, count * kernels::dataTypeSize(dt));
    kernels::scaleDivide(x.data(), count, dt, divisor);
    store(buf, x);
  }
  void* allocate(size_t bytes) override {
    ++allocations;
    void* p = ::operator new(bytes == 0 ? 1 : bytes);
    gRuntime.add(p, bytes == 0 ? 1 : bytes, this);
    return p;
  }
  void release(void* p) override {
    gRuntime.remove(p);
    ::operator delete(p);
  }

  std::atomic<long> copies{0}, reduces{0}, scales{0}, allocations{0};

 private:
  static void store(void* dst, std::vector<uint8_t>& v) {
    for (uint8_t& b : v) b ^= kKey;
    if (!v.empty()) std::memcpy(dst, v.data(), v.size());
  }
  std::string name_;
};

FakeDevice* FakeRuntime::owner(const void* p) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = blocks_.upper_bound(reinterpret_cast<uintptr_t>(p));
  if (it == blocks_.begin()) return nullptr;
  --it;
  return reinterpret_cast<uintptr_t>(p) < it->first + it->second.first ? it->second.second : nullptr;
}
mem::Device* FakeRuntime::deviceOf(const void* p) { return owner(p); }
mem::Device* FakeRuntime::current() { return current_.load(); }

FakeDevice gDevice0(0), gDevice1(1);

// Registers the fake runtime for one test, with `current` as the device new communicators bind to.
struct UseFakeRuntime {
  explicit UseFakeRuntime(FakeDevice* current) {
    gRuntime.current_ = current;
    mem::setClassifier(&gRuntime);
  }
  ~UseFakeRuntime() {
    mem::setClassifier(nullptr);
    gRuntime.current_ = nullptr;
  }
};

// A buffer in the fake device's memory, filled from and read back into host bytes.
class DeviceBuf {
 public:
  DeviceBuf(FakeDevice& d, size_t bytes) : d_(d), bytes_(bytes), p_(static_cast<uint8_t*>(d.allocate(bytes))) {}
  ~DeviceBuf() { d_.release(p_); }
  DeviceBuf(const DeviceBuf&) = delete;
  DeviceBuf& operator=(const DeviceBuf&) = delete;
  uint8_t* data() { return p_; }
  void upload(const std::vector<uint8_t>& host) {
    std::vector<uint8_t> v = flip(host.data(), bytes_);
    std::memcpy(p_, v.data(), bytes_);
  }
  std::vector<uint8_t> download() const { return flip(p_, bytes_); }

 private:
  FakeDevice& d_;
  size_t bytes_;
  uint8_t* p_;
};

enum class Coll { AllReduce, ReduceScatter, AllGather, Broadcast, Reduce, AllToAll, SendRecv };
const char* collName(Coll c) {
  const char* names[] = {"AllReduce", "ReduceScatter", "AllGather", "Broadcast", "Reduce", "AllToAll", "SendRecv"};
  return names[static_cast<int>(c)];
}

// One call: how big its buffers are, where in place puts the input, and the call itself.
struct Shape {
  size_t sendBytes, recvBytes, inPlaceAt;  // inPlaceAt: the input's offset in recvbuff when in place
  bool canBeInPlace;
};
Shape shapeOf(Coll c, size_t count, size_t es, int n, int r) {
  const size_t b = count * es, all = b * static_cast<size_t>(n);
  switch (c) {
    case Coll::AllReduce: case Coll::Broadcast: case Coll::Reduce: return {b, b, 0, true};
    case Coll::ReduceScatter: return {all, b, 0, false};
    case Coll::AllGather: return {b, all, b * static_cast<size_t>(r), true};
    case Coll::AllToAll: return {all, all, 0, false};
    case Coll::SendRecv: return {b, b, 0, false};
  }
  return {};
}

chorusResult_t call(Coll c, const void* send, void* recv, size_t count, chorusDataType_t dt, chorusRedOp_t op,
                    int root, int r, int n, chorusComm_t comm) {
  switch (c) {
    case Coll::AllReduce: return chorusAllReduce(send, recv, count, dt, op, comm, nullptr);
    case Coll::ReduceScatter: return chorusReduceScatter(send, recv, count, dt, op, comm, nullptr);
    case Coll::AllGather: return chorusAllGather(send, recv, count, dt, comm, nullptr);
    case Coll::Broadcast: return chorusBroadcast(send, recv, count, dt, root, comm, nullptr);
    case Coll::Reduce: return chorusReduce(send, recv, count, dt, op, root, comm, nullptr);
    case Coll::AllToAll: return chorusAllToAll(send, recv, count, dt, comm, nullptr);
    case Coll::SendRecv: {  // to the next rank and from the previous one; with one rank, to and from itself
      chorusGroupStart();
      chorusResult_t a = chorusSend(send, count, dt, (r + 1) % n, comm, nullptr);
      chorusResult_t b = chorusRecv(recv, count, dt, (r + n - 1) % n, comm, nullptr);
      chorusResult_t e = chorusGroupEnd();
      return a != chorusSuccess ? a : b != chorusSuccess ? b : e;
    }
  }
  return chorusInternalError;
}

bool reduces(Coll c) { return c == Coll::AllReduce || c == Coll::ReduceScatter || c == Coll::Reduce; }

struct Report {
  std::vector<std::string> first;
  size_t total = 0;
  void add(std::string s) {
    if (first.size() < 5) first.push_back(std::move(s));
    ++total;
  }
};

// Runs `c` once over host memory and once over device memory with the same inputs, and reports unless the
// device's output equals the host's bit for bit (and, out of place, the device's input is unchanged).
void compareOne(Coll c, chorusDataType_t dt, chorusRedOp_t op, size_t count, bool inPlace, int root, int r, int n,
                chorusComm_t comm, Report* report) {
  const size_t es = test::typeSize(dt);
  const Shape s = shapeOf(c, count, es, n, r);
  std::vector<uint8_t> input(s.sendBytes);
  const int shapeOp = reduces(c) ? static_cast<int>(op) : test::kMovement;
  for (size_t i = 0; i < s.sendBytes / es; ++i)
    test::writeRaw(input.data() + i * es, es, test::inputRaw(dt, shapeOp, count * 31 + static_cast<int>(c), r, i));
  std::vector<uint8_t> fill(s.recvBytes, 0xC3);  // what recvbuff holds before the call
  // Host memory.
  std::vector<uint8_t> hostRecv = fill;
  if (inPlace) std::memcpy(hostRecv.data() + s.inPlaceAt, input.data(), s.sendBytes);
  const void* hostSend = inPlace ? static_cast<const void*>(hostRecv.data() + s.inPlaceAt) : input.data();
  check(call(c, hostSend, hostRecv.data(), count, dt, op, root, r, n, comm), comm, "host call");
  // The fake device's memory.
  DeviceBuf devSend(gDevice0, s.sendBytes), devRecv(gDevice0, s.recvBytes);
  devSend.upload(input);
  std::vector<uint8_t> devFill = fill;
  if (inPlace) std::memcpy(devFill.data() + s.inPlaceAt, input.data(), s.sendBytes);
  devRecv.upload(devFill);
  const void* devSendPtr = inPlace ? static_cast<const void*>(devRecv.data() + s.inPlaceAt) : devSend.data();
  check(call(c, devSendPtr, devRecv.data(), count, dt, op, root, r, n, comm), comm, "device call");
  const std::vector<uint8_t> got = devRecv.download();
  const std::string what = std::string(collName(c)) + " n=" + std::to_string(n) + " rank " + std::to_string(r) + " " +
                           test::typeName(dt) + " " + test::opName(op) + " count " + std::to_string(count) +
                           (inPlace ? " in place" : "") + " root " + std::to_string(root);
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != hostRecv[i]) {
      report->add(what + ": recvbuff byte " + std::to_string(i) + " is " + std::to_string(got[i]) +
                  " over device memory, " + std::to_string(hostRecv[i]) + " over host memory");
      return;
    }
  if (!inPlace && devSend.download() != input) report->add(what + ": the device's sendbuff changed");
}

void runMatrix(int n, const char* algo, const std::vector<Coll>& colls) {
  setenv("CHORUS_ALGO", algo, 1);
  UseFakeRuntime fake(&gDevice0);
  const long reducesBefore = gDevice0.reduces.load(), allocationsBefore = gDevice0.allocations.load();
  Report report;
  std::mutex mu;
  auto errors = runRanks(n, [&](int r, chorusComm_t& comm) {
    Report mine;
    for (Coll c : colls)
      for (chorusDataType_t dt : test::kAllTypes)
        for (chorusRedOp_t op : test::kAllOps) {
          if (!reduces(c) && op != chorusSum) continue;
          for (size_t count : {size_t{1}, size_t{7}, size_t{1031}, size_t{40009}})
            for (bool inPlace : {false, true}) {
              if (inPlace && !shapeOf(c, count, 1, n, r).canBeInPlace) continue;
              const int root = (c == Coll::Broadcast || c == Coll::Reduce) ? static_cast<int>(count % n) : -1;
              compareOne(c, dt, op, count, inPlace, root, r, n, comm, &mine);
            }
        }
    std::lock_guard<std::mutex> g(mu);
    for (auto& f : mine.first) report.add(f);
    report.total += mine.total - mine.first.size();
  });
  unsetenv("CHORUS_ALGO");
  for (const auto& e : errors) ADD_FAILURE() << e;
  for (const auto& f : report.first) ADD_FAILURE() << f;
  EXPECT_EQ(report.total, 0u) << "mismatches in all";
  bool anyReduction = false;
  for (Coll c : colls) anyReduction |= reduces(c);
  if (n > 1 && anyReduction) {
    EXPECT_GT(gDevice0.reduces.load(), reducesBefore) << "no reduction went through the device";
    EXPECT_GT(gDevice0.allocations.load() - allocationsBefore, 0) << "no scratch came from the device";
  }
}

class Spaces : public ::testing::TestWithParam<int> {};

TEST_P(Spaces, AllReduceEveryAlgorithmOverDeviceMemoryEqualsHost) {
  for (const char* algo : {"AUTO", "RING", "TREE"}) {
    SCOPED_TRACE(algo);
    runMatrix(GetParam(), algo, {Coll::AllReduce});
  }
}

TEST_P(Spaces, EveryOtherCollectiveOverDeviceMemoryEqualsHost) {
  runMatrix(GetParam(), "AUTO",
            {Coll::ReduceScatter, Coll::AllGather, Coll::Broadcast, Coll::Reduce, Coll::AllToAll, Coll::SendRecv});
}

INSTANTIATE_TEST_SUITE_P(Ranks, Spaces, ::testing::Values(1, 2, 3, 4, 5));

// The API's answer to buffers outside the communicator's memory, and that the communicator stays usable.
TEST(SpaceArguments, BuffersOutsideTheCommunicatorsMemoryAreRefusedNamingThem) {
  UseFakeRuntime fake(&gDevice0);
  auto errors = runRanks(2, [&](int r, chorusComm_t& comm) {
    DeviceBuf a(gDevice0, 64), b(gDevice0, 64), other(gDevice1, 64);
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

TEST(SpaceArguments, AHostOnlyCommunicatorRefusesDeviceBuffers) {
  mem::setClassifier(&gRuntime);  // a device runtime, but none current when the communicators were created
  auto errors = runRanks(2, [&](int, chorusComm_t& comm) {
    DeviceBuf a(gDevice0, 64);
    EXPECT_EQ(chorusAllReduce(a.data(), a.data(), 16, chorusFloat32, chorusSum, comm, nullptr), chorusInvalidArgument);
    std::string text = chorusGetLastError(comm);
    EXPECT_NE(text.find("sendbuff"), std::string::npos) << text;
    EXPECT_NE(text.find("host memory only"), std::string::npos) << text;
  });
  mem::setClassifier(nullptr);
  for (const auto& e : errors) ADD_FAILURE() << e;
}

}  // namespace
