// The collective matrix over a device's memory (test_memory_spaces over the fake device, test_cuda over a GPU):
// every collective, datatype, op, count and placement, run once over host memory and once over the device's
// memory with the same inputs; the device's output must equal the host's bit for bit (test_collectives and
// test_gather_scatter check the host's against their reference), and an out-of-place input must stay unchanged.
// The bitwise ops and PreMulSum (made by each rank for the pair of calls) run at the two smallest counts.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <iterator>
#include <mutex>
#include <string>
#include <vector>

#include "chorus/chorus.h"
#include "test/collective_harness.h"
#include "test/ranks.h"
#include "test/reference.h"

namespace chorus::test {

// One device's memory as a test handles it: allocated, and copied to and from host memory, by the test's means.
class TestMemory {
 public:
  virtual ~TestMemory() = default;
  virtual void* allocate(size_t bytes) = 0;
  virtual void release(void* p) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;  // either side may be host memory
};

// A buffer in a device's memory, filled from and read back into host bytes.
class DeviceBuf {
 public:
  DeviceBuf(TestMemory& memory, size_t bytes)
      : memory_(memory), bytes_(bytes), p_(static_cast<uint8_t*>(memory.allocate(bytes))) {}
  ~DeviceBuf() { memory_.release(p_); }
  DeviceBuf(const DeviceBuf&) = delete;
  DeviceBuf& operator=(const DeviceBuf&) = delete;
  uint8_t* data() { return p_; }
  void upload(const std::vector<uint8_t>& host) { memory_.copy(p_, host.data(), bytes_); }
  std::vector<uint8_t> download() const {
    std::vector<uint8_t> v(bytes_);
    memory_.copy(v.data(), p_, bytes_);
    return v;
  }

 private:
  TestMemory& memory_;
  size_t bytes_;
  uint8_t* p_;
};

// Values into and out of a device buffer, through the test's own copies.
template <typename T>
void uploadValues(DeviceBuf& buf, const std::vector<T>& v) {
  std::vector<uint8_t> bytes(v.size() * sizeof(T));
  std::memcpy(bytes.data(), v.data(), bytes.size());
  buf.upload(bytes);
}
template <typename T>
std::vector<T> downloadValues(const DeviceBuf& buf, size_t count) {
  const std::vector<uint8_t> bytes = buf.download();
  std::vector<T> v(count);
  std::memcpy(v.data(), bytes.data(), count * sizeof(T));
  return v;
}

enum class Coll {
  AllReduce, ReduceScatter, AllGather, Broadcast, Reduce, AllToAll, SendRecv, Gather, Scatter, AllGatherV,
  ReduceScatterV
};
inline const char* collName(Coll c) {
  const char* names[] = {"AllReduce", "ReduceScatter", "AllGather",  "Broadcast", "Reduce",        "AllToAll",
                         "SendRecv",  "Gather",        "Scatter",    "AllGatherV", "ReduceScatterV"};
  return names[static_cast<int>(c)];
}

// The V kinds' counts for a call of `count` on n ranks: rank p's count + p, but none for rank 1.
inline std::vector<size_t> countsOf(size_t count, int n) {
  std::vector<size_t> v;
  for (int p = 0; p < n; ++p) v.push_back(p == 1 ? 0 : count + static_cast<size_t>(p));
  return v;
}
// Where rank p's block starts (p == n: the blocks' total).
inline size_t blockAt(size_t count, int p) {
  size_t at = 0;
  for (size_t c : countsOf(count, p)) at += c;
  return at;
}

// One call: how big its buffers are, where in place puts the input, and the call itself.
struct Shape {
  size_t sendBytes, recvBytes, inPlaceAt;  // inPlaceAt: the input's offset in recvbuff when in place
  bool canBeInPlace;
};
inline Shape shapeOf(Coll c, size_t count, size_t es, int n, int r) {
  const size_t b = count * es, all = b * static_cast<size_t>(n);
  const size_t mine = countsOf(count, n)[static_cast<size_t>(r)] * es, every = blockAt(count, n) * es;
  switch (c) {
    case Coll::AllReduce: case Coll::Broadcast: case Coll::Reduce: return {b, b, 0, true};
    case Coll::ReduceScatter: return {all, b, 0, false};
    case Coll::AllGather: return {b, all, b * static_cast<size_t>(r), true};
    case Coll::AllToAll: return {all, all, 0, false};
    case Coll::SendRecv: return {b, b, 0, false};
    case Coll::Gather: return {b, all, 0, false};  // in place: test_gather_scatter's (a root's layout only)
    case Coll::Scatter: return {all, b, 0, false};
    case Coll::AllGatherV: return {mine, every, blockAt(count, r) * es, true};
    case Coll::ReduceScatterV: return {every, mine, 0, false};
  }
  return {};
}

inline chorusResult_t call(Coll c, const void* send, void* recv, size_t count, chorusDataType_t dt, chorusRedOp_t op,
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
    case Coll::Gather: return chorusGather(send, recv, count, dt, root, comm, nullptr);
    case Coll::Scatter: return chorusScatter(send, recv, count, dt, root, comm, nullptr);
    case Coll::AllGatherV: return chorusAllGatherV(send, recv, countsOf(count, n).data(), dt, comm, nullptr);
    case Coll::ReduceScatterV:
      return chorusReduceScatterV(send, recv, countsOf(count, n).data(), dt, op, comm, nullptr);
  }
  return chorusInternalError;
}

inline bool reduces(Coll c) {
  return c == Coll::AllReduce || c == Coll::ReduceScatter || c == Coll::Reduce || c == Coll::ReduceScatterV;
}
inline bool rooted(Coll c) {
  return c == Coll::Broadcast || c == Coll::Reduce || c == Coll::Gather || c == Coll::Scatter;
}

// Runs `c` once over host memory and once over device memory with the same inputs, and reports unless the
// device's output equals the host's bit for bit (and, out of place, the device's input is unchanged).
inline void compareOne(TestMemory& memory, Coll c, chorusDataType_t dt, chorusRedOp_t op, size_t count, bool inPlace,
                       int root, int r, int n, chorusComm_t comm, Report* report) {
  const size_t es = typeSize(dt);
  const Shape s = shapeOf(c, count, es, n, r);
  std::vector<uint8_t> input(s.sendBytes);
  const int shapeOp = reduces(c) ? static_cast<int>(op) : kMovement;
  for (size_t i = 0; i < s.sendBytes / es; ++i)
    writeRaw(input.data() + i * es, es, inputRaw(dt, shapeOp, count * 31 + static_cast<int>(c), r, i));
  std::vector<uint8_t> fill(s.recvBytes, 0xC3);  // what recvbuff holds before the call
  // Host memory.
  std::vector<uint8_t> hostRecv = fill;
  // A zero-byte input has no storage (data() may be null, which memcpy must not see even for 0 bytes).
  if (inPlace && s.sendBytes > 0) std::memcpy(hostRecv.data() + s.inPlaceAt, input.data(), s.sendBytes);
  const void* hostSend = inPlace ? static_cast<const void*>(hostRecv.data() + s.inPlaceAt) : input.data();
  CallOp madeOp(op, dt, r, comm);  // kPreMulSum: one made op for both calls
  check(call(c, hostSend, hostRecv.data(), count, dt, madeOp.get(), root, r, n, comm), comm, "host call");
  // The device's memory.
  DeviceBuf devSend(memory, s.sendBytes), devRecv(memory, s.recvBytes);
  devSend.upload(input);
  std::vector<uint8_t> devFill = fill;
  if (inPlace && s.sendBytes > 0) std::memcpy(devFill.data() + s.inPlaceAt, input.data(), s.sendBytes);
  devRecv.upload(devFill);
  const void* devSendPtr = inPlace ? static_cast<const void*>(devRecv.data() + s.inPlaceAt) : devSend.data();
  check(call(c, devSendPtr, devRecv.data(), count, dt, madeOp.get(), root, r, n, comm), comm, "device call");
  madeOp.destroy();
  const std::vector<uint8_t> got = devRecv.download();
  const std::string what = std::string(collName(c)) + " n=" + std::to_string(n) + " rank " + std::to_string(r) + " " +
                           typeName(dt) + " " + opName(op) + " count " + std::to_string(count) +
                           (inPlace ? " in place" : "") + " root " + std::to_string(root);
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != hostRecv[i]) {
      report->add(what + ": recvbuff byte " + std::to_string(i) + " is " + std::to_string(got[i]) +
                  " over device memory, " + std::to_string(hostRecv[i]) + " over host memory");
      return;
    }
  if (!inPlace && devSend.download() != input) report->add(what + ": the device's sendbuff changed");
}

// Under a sanitizer (10-30x slower), or with CHORUS_TEST_MATRIX=small (compute-sanitizer, scripts/gpu-check.sh),
// the matrix keeps every collective, rank count, op and placement, three of the ten datatypes and three of the four
// counts; otherwise it runs them all.
inline bool smallMatrix() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return true;
#else
  const char* v = std::getenv("CHORUS_TEST_MATRIX");
  return v != nullptr && std::string(v) == "small";
#endif
}
inline std::vector<chorusDataType_t> matrixTypes() {
  if (smallMatrix()) return {chorusUint8, chorusFloat16, chorusFloat32};
  return std::vector<chorusDataType_t>(std::begin(kAllTypes), std::end(kAllTypes));
}
inline std::vector<size_t> matrixCounts() {
  if (smallMatrix()) return {1, 1031, 40009};
  return {1, 7, 1031, 40009};
}

// One rank's part of the matrix of `colls` (rank r of n on comm), its mismatches reported into `report`.
inline void rankMatrix(TestMemory& memory, int r, int n, chorusComm_t comm, const std::vector<Coll>& colls,
                       Report* report) {
  const std::vector<size_t> counts = matrixCounts();
  for (Coll c : colls)
    for (chorusDataType_t dt : matrixTypes())
      for (chorusRedOp_t op : reduces(c) ? opsFor(dt) : std::vector<chorusRedOp_t>{chorusSum}) {
        const bool arithmetic = std::find(std::begin(kAllOps), std::end(kAllOps), op) != std::end(kAllOps);
        for (size_t count : counts)
          for (bool inPlace : {false, true}) {
            if (!arithmetic && count != counts[0] && count != counts[1]) continue;
            if (inPlace && !shapeOf(c, count, 1, n, r).canBeInPlace) continue;
            const int root = rooted(c) ? static_cast<int>(count % n) : -1;
            compareOne(memory, c, dt, op, count, inPlace, root, r, n, comm, report);
          }
      }
}

// Runs the matrix of `colls` on n ranks (threads of this process) with CHORUS_ALGO=algo, reporting mismatches.
inline void runMatrix(TestMemory& memory, int n, const char* algo, const std::vector<Coll>& colls) {
  setenv("CHORUS_ALGO", algo, 1);
  Report report;
  std::mutex mu;
  auto errors = runRanks(n, [&](int r, chorusComm_t& comm) {
    Report mine;
    rankMatrix(memory, r, n, comm, colls, &mine);
    std::lock_guard<std::mutex> g(mu);
    for (auto& f : mine.first) report.add(f);
    report.total += mine.total - mine.first.size();
  });
  unsetenv("CHORUS_ALGO");
  for (const auto& e : errors) ADD_FAILURE() << e;
  for (const auto& f : report.first) ADD_FAILURE() << f;
  EXPECT_EQ(report.total, 0u) << "mismatches in all";
}

inline const std::vector<Coll> kAllButAllReduce = {Coll::ReduceScatter, Coll::AllGather, Coll::Broadcast,
                                                    Coll::Reduce,        Coll::AllToAll,  Coll::SendRecv};
inline const std::vector<Coll> kGatherScatterV = {Coll::Gather, Coll::Scatter, Coll::AllGatherV,
                                                  Coll::ReduceScatterV};

}  // namespace chorus::test
