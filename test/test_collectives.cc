// The full correctness matrix: every collective x datatype x reduction op x count x nranks, in place and out of
// place, blocking (stream NULL), on a stream (one synchronize per call) and queued back-to-back on two streams
// (one synchronize per batch), with the root varied for Broadcast/Reduce. The ops are the arithmetic ones, the
// bitwise ones on integer datatypes and PreMulSum (an op each rank makes for the call with a scalar of its own and
// destroys as soon as the call is issued); the bitwise ops and PreMulSum run each case in one mode, rotating, so
// that each still meets every mode. Gather, Scatter, AllGatherV and ReduceScatterV are test_gather_scatter.cc's,
// on the same harness (test/collective_harness.h).
//
// Layout: one parametrised test per (collective, nranks) builds one communicator per rank and runs a list of
// cases through it (communicator creation is the expensive part). Each case fills its buffers from
// (seed, rank, index), runs the call, then checks on every rank:
//   * the output against a reference computed here, element by element (int64/uint64/double arithmetic, then
//     converted to the datatype; integers wrap exactly as two's complement; Avg = sum / nranks with C
//     truncation for integers);
//   * out of place: that sendbuff is bit-for-bit unchanged; in place: that input-only parts are unchanged;
//   * that GUARD bytes before and after every buffer, and buffers the API says are not written (Reduce's
//     recvbuff on non-roots, a pair-less rank's recvbuff), still hold their fill pattern.
// About one third of the cases offsets every buffer by 1..7 bytes (the header promises any alignment).
//
// Inputs are chosen so that the arithmetic is exact in every type, so results are compared exactly, except Avg
// of floating types (rounding of sum / nranks), compared with a relative tolerance: 1e-2 for float16 and
// bfloat16, 1e-6 for float32, 1e-12 for float64 (|actual - expected| <= tol * |expected|).
//   integers, sum/max/min/band/bor/bxor/premulsum: the full bit range (wraparound, sign and high bits exercised);
//   integers, prod: {-2,-1,1,2,3} (signed) or {1,2,3} (unsigned); int8/uint8 products wrap (defined behaviour);
//   integers, avg: [-15, 15] (signed) or [0, 31] (unsigned), so the sum of 8 never wraps even in 8 bits;
//   floats, sum/avg/premulsum: multiples of 0.25 in [-2, 2] (every partial sum of <= 8 is exact in bfloat16;
//     PreMulSum's scalars keep it exact: test/reference.h);
//   floats, prod: {+-0.5, +-1, +-2} (products are powers of two within float16/bfloat16 range);
//   floats, max/min: multiples of 0.25 in [-16, 16];
//   data-movement collectives: arbitrary bit patterns (NaNs included), compared bit for bit.
//
// Nothing is printed per case. A failure names collective, nranks, rank, dtype, op, count, mode, placement,
// root and misalignment, the buffer, and its first wrong index with expected and actual values.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "test/collective_harness.h"

namespace {

using namespace chorus::test;  // collective_harness.h, reference.h

// ------------------------------------------------------------------------------------------------------------
// Cases.

enum class Coll { AllReduce, Broadcast, Reduce, AllGather, ReduceScatter, AllToAll, SendRecvRing, SendRecvPairs, Barrier };
const char* collName(Coll c) {
  switch (c) {
    case Coll::AllReduce: return "AllReduce";
    case Coll::Broadcast: return "Broadcast";
    case Coll::Reduce: return "Reduce";
    case Coll::AllGather: return "AllGather";
    case Coll::ReduceScatter: return "ReduceScatter";
    case Coll::AllToAll: return "AllToAll";
    case Coll::SendRecvRing: return "SendRecvRing";
    case Coll::SendRecvPairs: return "SendRecvPairs";
    case Coll::Barrier: return "Barrier";
  }
  return "?";
}

bool isReduction(Coll c) { return c == Coll::AllReduce || c == Coll::Reduce || c == Coll::ReduceScatter; }
bool isRooted(Coll c) { return c == Coll::Broadcast || c == Coll::Reduce; }
bool hasInPlace(Coll c) {
  return c == Coll::AllReduce || c == Coll::Broadcast || c == Coll::Reduce || c == Coll::AllGather ||
         c == Coll::ReduceScatter;
}

struct Case {
  Coll coll = Coll::AllReduce;
  chorusDataType_t dt = chorusFloat32;
  chorusRedOp_t op = chorusSum;  // reductions only
  size_t count = 0;              // the call's count argument (per-rank block for gather/scatter/alltoall)
  bool inPlace = false;
  Mode mode = Mode::Blocking;
  int root = 0;                  // Broadcast / Reduce
  size_t misalign = 0;           // bytes added to every buffer's address
  uint64_t seed = 0;
  // Out-of-place Broadcast / Reduce: non-roots pass NULL for the buffer the API ignores there (Broadcast's
  // sendbuff, Reduce's recvbuff) instead of a buffer that is checked to stay untouched.
  bool nullUnused = false;
  const std::vector<double>* reference = nullptr;  // AllReduce only: precomputed expected values (big counts)
};

std::string describe(const Case& c, int n, int r) {
  std::string s = std::string(collName(c.coll)) + " nranks=" + std::to_string(n) + " rank=" + std::to_string(r);
  if (c.coll == Coll::Barrier) return s + " mode=" + modeName(c.mode);
  s += std::string(" dtype=") + typeName(c.dt);
  if (isReduction(c.coll)) s += std::string(" op=") + opName(c.op);
  s += " count=" + std::to_string(c.count) + " mode=" + modeName(c.mode);
  s += c.inPlace ? " in-place" : " out-of-place";
  if (isRooted(c.coll)) s += " root=" + std::to_string(c.root);
  if (isRooted(c.coll) && !c.inPlace && c.nullUnused)
    s += c.coll == Coll::Broadcast ? " (sendbuff NULL off the root)" : " (recvbuff NULL off the root)";
  s += " misalign=" + std::to_string(c.misalign);
  return s;
}

// One case on one rank: buffers, the call, the checks.
class Running {
 public:
  Running(const Case& c, int n, int r)
      : c_(c), n_(n), r_(r), es_(typeSize(c.dt)), inOp_(isReduction(c.coll) ? static_cast<int>(c.op) : kMovement) {}

  void prepare() {
    const size_t cnt = c_.count, nb = cnt * es_, n = static_cast<size_t>(n_), r = static_cast<size_t>(r_);
    switch (c_.coll) {
      case Coll::AllReduce:
        recv_ = make(nb);
        recvPtr_ = recv_->data();
        if (c_.inPlace) {
          fill(*recv_, 0, cnt, r_, 0);
          sendPtr_ = recvPtr_;
        } else {
          send_ = make(nb);
          fill(*send_, 0, cnt, r_, 0);
          sendPtr_ = send_->data();
        }
        break;
      case Coll::Broadcast:
        recv_ = make(nb);
        recvPtr_ = recv_->data();
        if (c_.inPlace) {
          if (r_ == c_.root) fill(*recv_, 0, cnt, r_, 0);
          sendPtr_ = recvPtr_;
        } else if (r_ == c_.root || !c_.nullUnused) {  // a non-root's sendbuff must not be read nor written
          send_ = make(nb);
          fill(*send_, 0, cnt, r_, 0);
          sendPtr_ = send_->data();
        }
        break;
      case Coll::Reduce:
        if (c_.inPlace) {
          recv_ = make(nb);
          fill(*recv_, 0, cnt, r_, 0);
          sendPtr_ = recvPtr_ = recv_->data();
        } else {
          send_ = make(nb);
          fill(*send_, 0, cnt, r_, 0);
          sendPtr_ = send_->data();
          if (r_ == c_.root || !c_.nullUnused) {  // a non-root's recvbuff must not be written
            recv_ = make(nb);
            recvPtr_ = recv_->data();
          }
        }
        break;
      case Coll::AllGather:
        recv_ = make(nb * n);
        recvPtr_ = recv_->data();
        if (c_.inPlace) {
          fill(*recv_, r * cnt, cnt, r_, 0);
          sendPtr_ = recv_->data() + r * nb;
        } else {
          send_ = make(nb);
          fill(*send_, 0, cnt, r_, 0);
          sendPtr_ = send_->data();
        }
        break;
      case Coll::ReduceScatter:
        if (c_.inPlace) {
          recv_ = make(nb * n);
          fill(*recv_, 0, cnt * n, r_, 0);
          sendPtr_ = recv_->data();
          recvPtr_ = recv_->data() + r * nb;
        } else {
          send_ = make(nb * n);
          fill(*send_, 0, cnt * n, r_, 0);
          sendPtr_ = send_->data();
          recv_ = make(nb);
          recvPtr_ = recv_->data();
        }
        break;
      case Coll::AllToAll:
        send_ = make(nb * n);
        fill(*send_, 0, cnt * n, r_, 0);
        sendPtr_ = send_->data();
        recv_ = make(nb * n);
        recvPtr_ = recv_->data();
        break;
      case Coll::SendRecvRing:
      case Coll::SendRecvPairs:
        send_ = make(nb);
        fill(*send_, 0, cnt, r_, 0);
        sendPtr_ = send_->data();
        recv_ = make(nb);
        recvPtr_ = recv_->data();
        break;
      case Coll::Barrier: break;
    }
  }

  void issue(chorusComm_t comm, chorusStream_t stream) {
    const size_t cnt = c_.count;
    const chorusDataType_t dt = c_.dt;
    chorusResult_t rc = chorusSuccess;
    switch (c_.coll) {
      case Coll::AllReduce:
      case Coll::Reduce:
      case Coll::ReduceScatter: {
        CallOp op(c_.op, dt, r_, comm);
        if (c_.coll == Coll::AllReduce) rc = chorusAllReduce(sendPtr_, recvPtr_, cnt, dt, op.get(), comm, stream);
        else if (c_.coll == Coll::Reduce) rc = chorusReduce(sendPtr_, recvPtr_, cnt, dt, op.get(), c_.root, comm, stream);
        else rc = chorusReduceScatter(sendPtr_, recvPtr_, cnt, dt, op.get(), comm, stream);
        if (rc == chorusSuccess) op.destroy();  // a call issued keeps its scalar: this changes nothing
        break;
      }
      case Coll::Broadcast: rc = chorusBroadcast(sendPtr_, recvPtr_, cnt, dt, c_.root, comm, stream); break;
      case Coll::AllGather: rc = chorusAllGather(sendPtr_, recvPtr_, cnt, dt, comm, stream); break;
      case Coll::AllToAll: rc = chorusAllToAll(sendPtr_, recvPtr_, cnt, dt, comm, stream); break;
      case Coll::SendRecvRing:
      case Coll::SendRecvPairs: {
        const int to = sendPeer(), from = recvPeer();
        if (to < 0) return;  // no partner: this rank sits the exchange out
        check(chorusGroupStart(), comm, describe(c_, n_, r_) + ": group start");
        // Odd ranks record the receive first: the order inside a group must not matter.
        if (r_ % 2 == 1) check(chorusRecv(recvPtr_, cnt, dt, from, comm, stream), comm, describe(c_, n_, r_) + ": recv");
        check(chorusSend(sendPtr_, cnt, dt, to, comm, stream), comm, describe(c_, n_, r_) + ": send");
        if (r_ % 2 == 0) check(chorusRecv(recvPtr_, cnt, dt, from, comm, stream), comm, describe(c_, n_, r_) + ": recv");
        rc = chorusGroupEnd();
        break;
      }
      case Coll::Barrier: rc = chorusBarrier(comm, stream); break;
    }
    check(rc, comm, describe(c_, n_, r_));
  }

  void verify(Report& rep) {
    const size_t cnt = c_.count;
    const size_t n = static_cast<size_t>(n_), r = static_cast<size_t>(r_);
    auto input = [&](int q, size_t j) { return inputRaw(c_.dt, inOp_, c_.seed, q, j); };
    auto inputWant = [&](int q, size_t off) {  // element j holds input(q, j + off), bit for bit
      return [=, this](size_t j) { return Want{inputRaw(c_.dt, inOp_, c_.seed, q, j + off), 0, Cmp::Bytes}; };
    };
    auto reduced = [&](size_t off) {  // element j holds the reduction of input(*, j + off)
      return [=, this](size_t j) {
        if (c_.reference) {
          double v = (*c_.reference)[j + off];
          return c_.op == chorusAvg && isFloat(c_.dt)
                     ? Want{doubleToRaw(c_.dt, v), v, Cmp::Approx, avgTolerance(c_.dt) * std::fabs(v)}
                     : Want{doubleToRaw(c_.dt, v), v, Cmp::Exact};
        }
        return referenceReduce(c_.dt, c_.op, n_,
                               [&](int q) { return inputRaw(c_.dt, inOp_, c_.seed, q, j + off); });
      };
    };
    switch (c_.coll) {
      case Coll::AllReduce:
        expect(rep, "recvbuff", recv_->data(), 0, cnt, reduced(0));
        if (!c_.inPlace) expect(rep, "sendbuff (unchanged)", send_->data(), 0, cnt, inputWant(r_, 0));
        break;
      case Coll::Broadcast:
        expect(rep, "recvbuff", recv_->data(), 0, cnt, inputWant(c_.root, 0));
        if (send_) expect(rep, "sendbuff (unchanged)", send_->data(), 0, cnt, inputWant(r_, 0));
        break;
      case Coll::Reduce:
        if (r_ == c_.root) {
          expect(rep, "recvbuff", recv_->data(), 0, cnt, reduced(0));
        } else if (c_.inPlace) {
          expect(rep, "buffer of a non-root (in place: not written)", recv_->data(), 0, cnt, inputWant(r_, 0));
        } else if (recv_) {
          expectPattern(rep, "recvbuff of a non-root (never written)", *recv_, 0, static_cast<long>(recv_->bytes()));
        }
        if (!c_.inPlace) expect(rep, "sendbuff (unchanged)", send_->data(), 0, cnt, inputWant(r_, 0));
        break;
      case Coll::AllGather:
        for (size_t q = 0; q < n; ++q)
          expect(rep, "recvbuff", recv_->data(), q * cnt, (q + 1) * cnt,
                 [&, q](size_t j) { return Want{input(static_cast<int>(q), j - q * cnt), 0, Cmp::Bytes}; });
        if (!c_.inPlace) expect(rep, "sendbuff (unchanged)", send_->data(), 0, cnt, inputWant(r_, 0));
        break;
      case Coll::ReduceScatter:
        if (c_.inPlace) {
          // Output block r; the other blocks are input only (sendbuff is const): unchanged.
          expect(rep, "sendbuff block (unchanged)", recv_->data(), 0, r * cnt, inputWant(r_, 0));
          expect(rep, "recvbuff (= sendbuff block rank)", recv_->data(), r * cnt, (r + 1) * cnt, reduced(0));
          expect(rep, "sendbuff block (unchanged)", recv_->data(), (r + 1) * cnt, n * cnt, inputWant(r_, 0));
        } else {
          expect(rep, "recvbuff", recv_->data(), 0, cnt, reduced(r * cnt));
          expect(rep, "sendbuff (unchanged)", send_->data(), 0, n * cnt, inputWant(r_, 0));
        }
        break;
      case Coll::AllToAll:
        for (size_t p = 0; p < n; ++p)
          expect(rep, "recvbuff", recv_->data(), p * cnt, (p + 1) * cnt,
                 [&, p](size_t j) { return Want{input(static_cast<int>(p), r * cnt + j - p * cnt), 0, Cmp::Bytes}; });
        expect(rep, "sendbuff (unchanged)", send_->data(), 0, n * cnt, inputWant(r_, 0));
        break;
      case Coll::SendRecvRing:
      case Coll::SendRecvPairs:
        if (recvPeer() >= 0)
          expect(rep, "recvbuff", recv_->data(), 0, cnt, inputWant(recvPeer(), 0));
        else
          expectPattern(rep, "recvbuff of a rank without partner", *recv_, 0, static_cast<long>(recv_->bytes()));
        expect(rep, "sendbuff (unchanged)", send_->data(), 0, cnt, inputWant(r_, 0));
        break;
      case Coll::Barrier: break;
    }
    expectGuards(rep, describe(c_, n_, r_), "sendbuff", send_.get());
    expectGuards(rep, describe(c_, n_, r_), "recvbuff", recv_.get());
  }

 private:
  std::unique_ptr<Buf> make(size_t bytes) const { return std::make_unique<Buf>(bytes, c_.misalign); }

  // Elements [first, first + count) of b get input(q, firstIndex + k).
  void fill(Buf& b, size_t first, size_t count, int q, size_t firstIndex) const {
    uint8_t* p = b.data() + first * es_;
    for (size_t k = 0; k < count; ++k) writeRaw(p + k * es_, es_, inputRaw(c_.dt, inOp_, c_.seed, q, firstIndex + k));
  }

  int sendPeer() const {
    if (c_.coll == Coll::SendRecvRing) return (r_ + 1) % n_;
    return (r_ ^ 1) < n_ ? (r_ ^ 1) : -1;
  }
  int recvPeer() const {
    if (c_.coll == Coll::SendRecvRing) return (r_ + n_ - 1) % n_;
    return (r_ ^ 1) < n_ ? (r_ ^ 1) : -1;
  }

  // Elements [begin, end) of the buffer at base against want(j); reports the first mismatch only.
  template <class W>
  void expect(Report& rep, const char* what, const uint8_t* base, size_t begin, size_t end, W want) const {
    expectElems(rep, describe(c_, n_, r_), c_.dt, what, base, begin, end, want);
  }
  void expectPattern(Report& rep, const char* what, const Buf& b, long from, long to) const {
    chorus::test::expectPattern(rep, describe(c_, n_, r_), what, b, from, to);
  }

  const Case c_;
  const int n_, r_;
  const size_t es_;
  const int inOp_;
  std::unique_ptr<Buf> send_, recv_;
  const void* sendPtr_ = nullptr;
  void* recvPtr_ = nullptr;
};

std::vector<int> roots(int n) {
  std::vector<int> v{0};
  for (int x : {n - 1, n / 2})
    if (std::find(v.begin(), v.end(), x) == v.end()) v.push_back(x);
  return v;
}

constexpr size_t kLarge = 1000003;

// The matrix for one collective at one nranks.
std::vector<Case> matrixCases(Coll coll, int n) {
  std::vector<Case> cases;
  uint64_t idx = 0;
  auto add = [&](Case c) {
    c.coll = coll;
    c.seed = mix(static_cast<uint64_t>(coll) * 1000003u + idx * 7919u + static_cast<uint64_t>(n));
    // Drawn from the seed so that they do not line up with the loop structure below.
    c.misalign = (c.seed >> 8) % 3 == 0 ? 1 + (c.seed >> 16) % 7 : 0;
    c.nullUnused = ((c.seed >> 24) & 1) != 0;
    ++idx;
    cases.push_back(c);
  };
  std::vector<bool> places{false};
  if (hasInPlace(coll)) places.push_back(true);
  std::vector<int> rootList{0};
  if (isRooted(coll)) rootList = roots(n);
  std::vector<size_t> counts;
  for (size_t c : {size_t(0), size_t(1), size_t(7), static_cast<size_t>(n - 1)})
    if (std::find(counts.begin(), counts.end(), c) == counts.end()) counts.push_back(c);

  // The arithmetic ops run in every mode; the bitwise ones and PreMulSum in one, rotating with count and datatype.
  auto runsIn = [](chorusRedOp_t op, size_t countIndex, size_t typeIndex, int mode) {
    return std::find(std::begin(kAllOps), std::end(kAllOps), op) != std::end(kAllOps) ||
           static_cast<int>((countIndex + typeIndex) % 3) == mode;
  };
  // Small counts: the whole datatype x op x placement x mode x root product.
  for (size_t ci = 0; ci < counts.size(); ++ci)
    for (Mode mode : {Mode::Blocking, Mode::Stream, Mode::Queued})
      for (size_t ti = 0; ti < std::size(kAllTypes); ++ti)
        for (chorusRedOp_t op : isReduction(coll) ? opsFor(kAllTypes[ti]) : std::vector<chorusRedOp_t>{chorusSum})
          for (bool inPlace : places)
            for (int root : rootList) {
              if (!runsIn(op, ci, ti, static_cast<int>(mode))) continue;
              const size_t count = counts[ci];
              const chorusDataType_t dt = kAllTypes[ti];
              Case c;
              c.dt = dt;
              c.op = op;
              c.count = count;
              c.inPlace = inPlace;
              c.mode = mode;
              c.root = root;
              add(c);
            }

  // 1000003 elements (several pipeline chunks, uneven segments): a representative subset; pair k runs in
  // mode k/2 (blocking, stream, queued: the last two back to back) and in place when k is odd. (Float32 sum at
  // large counts is the Large tests'.)
  const std::pair<chorusDataType_t, chorusRedOp_t> large[] = {
      {chorusFloat32, kPreMulSum}, {chorusInt32, chorusMax}, {chorusBfloat16, chorusAvg},
      {chorusFloat64, chorusProd}, {chorusUint8, chorusMin}, {chorusInt64, chorusBxor}};
  for (int k = 0; k < 6; ++k) {
    Case c;
    c.dt = large[k].first;
    c.op = isReduction(coll) ? large[k].second : chorusSum;
    c.count = kLarge;
    c.inPlace = hasInPlace(coll) && k % 2 == 1;
    c.mode = static_cast<Mode>(k / 2);
    c.root = rootList[static_cast<size_t>(k) % rootList.size()];
    add(c);
  }
  return cases;
}

// ------------------------------------------------------------------------------------------------------------
// The matrix: one test per (collective, nranks).

class Collectives : public ::testing::TestWithParam<std::tuple<Coll, int>> {};

// Barrier: nobody leaves (or, on a stream, completes) round k before every rank has entered it. Rank k % n is
// late to round k.
void barrierRounds(int n, int r, chorusComm_t comm, std::vector<std::atomic<int>>& arrived, Report& rep) {
  const int kRounds = 12;
  chorusStream_t s = nullptr;
  check(chorusStreamCreate(comm, &s), comm, "stream create");
  int round = 0;
  for (Mode mode : {Mode::Blocking, Mode::Stream, Mode::Queued}) {
    Case c;
    c.coll = Coll::Barrier;
    c.mode = mode;
    const int first = round;
    for (int k = 0; k < kRounds; ++k, ++round) {
      if (r == round % n) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      arrived[static_cast<size_t>(round)].fetch_add(1);
      check(chorusBarrier(comm, mode == Mode::Blocking ? nullptr : s), comm, describe(c, n, r));
      if (mode == Mode::Stream) {
        chorusResult_t q = chorusStreamQuery(s);  // success is only allowed once everyone has arrived
        if (q == chorusSuccess && arrived[static_cast<size_t>(round)].load() < n)
          rep.add(describe(c, n, r) + ": round " + std::to_string(round) + " complete with only " +
                  std::to_string(arrived[static_cast<size_t>(round)].load()) + " ranks arrived");
        check(chorusStreamSynchronize(s), comm, describe(c, n, r) + ": synchronize");
      }
      if (mode != Mode::Queued && arrived[static_cast<size_t>(round)].load() != n)
        rep.add(describe(c, n, r) + ": left round " + std::to_string(round) + " with only " +
                std::to_string(arrived[static_cast<size_t>(round)].load()) + " ranks arrived");
    }
    if (mode == Mode::Queued) {
      check(chorusStreamSynchronize(s), comm, describe(c, n, r) + ": synchronize");
      for (int k = first; k < round; ++k)
        if (arrived[static_cast<size_t>(k)].load() != n)
          rep.add(describe(c, n, r) + ": queued round " + std::to_string(k) + " complete with only " +
                  std::to_string(arrived[static_cast<size_t>(k)].load()) + " ranks arrived");
    }
  }
  check(chorusStreamDestroy(s), comm, "stream destroy");
}

TEST_P(Collectives, Matrix) {
  const Coll coll = std::get<0>(GetParam());
  const int n = std::get<1>(GetParam());
  std::vector<std::string> errors;
  if (coll == Coll::Barrier) {
    std::vector<std::atomic<int>> arrived(64);
    errors = runRanks(n, [&](int r, chorusComm_t& comm) {
      Report rep;
      barrierRounds(n, r, comm, arrived, rep);
      rep.throwIfAny();
    });
  } else {
    const std::vector<Case> cases = matrixCases(coll, n);
    errors = runRanks(n, [&](int r, chorusComm_t& comm) {
      Report rep;
      runCases<Running>(r, n, comm, cases, rep);
      rep.throwIfAny();
    });
  }
  EXPECT_TRUE(errors.empty()) << collName(coll) << " nranks=" << n << ":" << joined(errors);
}

std::string paramName(const ::testing::TestParamInfo<std::tuple<Coll, int>>& info) {
  return std::string(collName(std::get<0>(info.param))) + "_n" + std::to_string(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(All, Collectives,
                         ::testing::Combine(::testing::Values(Coll::AllReduce, Coll::Broadcast, Coll::Reduce,
                                                              Coll::AllGather, Coll::ReduceScatter, Coll::AllToAll,
                                                              Coll::SendRecvRing, Coll::SendRecvPairs,
                                                              Coll::Barrier),
                                            ::testing::Values(1, 2, 3, 4, 5, 8)),
                         paramName);

// ------------------------------------------------------------------------------------------------------------
// Every kind of call queued back-to-back on one stream, then one synchronize; and a chain of calls where each
// consumes the previous one's output (so they must run in issue order).

class QueuedMixed : public ::testing::TestWithParam<int> {};

TEST_P(QueuedMixed, AllKindsOnOneStreamThenOneSynchronize) {
  const int n = GetParam();
  std::vector<Case> cases;
  auto add = [&](Coll coll, chorusDataType_t dt, chorusRedOp_t op, size_t count, bool inPlace, int root) {
    if ((coll == Coll::SendRecvRing || coll == Coll::SendRecvPairs) && n == 1) return;
    Case c;
    c.coll = coll;
    c.dt = dt;
    c.op = op;
    c.count = count;
    c.inPlace = inPlace;
    c.mode = Mode::Queued;
    c.root = root;
    c.seed = mix(0xabcdefu + cases.size());
    c.misalign = cases.size() % 2;
    cases.push_back(c);
  };
  for (int rep = 0; rep < 2; ++rep) {
    add(Coll::AllReduce, chorusFloat32, chorusSum, 1000, false, 0);
    add(Coll::Broadcast, chorusInt32, chorusSum, 777, true, n - 1);
    add(Coll::Barrier, chorusUint8, chorusSum, 0, false, 0);
    add(Coll::AllGather, chorusUint8, chorusSum, 333, false, 0);
    add(Coll::ReduceScatter, chorusFloat64, chorusMax, 129, true, 0);
    add(Coll::AllToAll, chorusInt64, chorusSum, 17, false, 0);
    add(Coll::Reduce, chorusBfloat16, chorusAvg, 500, false, n / 2);
    add(Coll::SendRecvRing, chorusFloat16, chorusSum, 99, false, 0);
    add(Coll::AllReduce, chorusUint32, chorusProd, 200003, true, 0);
    add(Coll::SendRecvPairs, chorusInt8, chorusSum, 1000, false, 0);
    add(Coll::ReduceScatter, chorusInt32, chorusMin, 70001, false, 0);
    add(Coll::Reduce, chorusInt64, chorusSum, 3, true, 0);
    add(Coll::AllReduce, chorusUint64, chorusBor, 4097, false, 0);
    add(Coll::ReduceScatter, chorusFloat16, kPreMulSum, 1001, true, 0);
  }
  const size_t kChain = 4099;
  auto errors = runRanks(n, [&](int r, chorusComm_t& comm) {
    Report rep;
    runCases<Running>(r, n, comm, cases, rep);

    // Chain on one stream: x -> AllReduce(sum) -> y; AllReduce(y, in place, sum); Broadcast(y, in place) from
    // the last rank; Reduce(y -> z, max) at root 0. y = n * S, z (root) = n * S, S = sum over ranks of x.
    chorusStream_t s = nullptr;
    check(chorusStreamCreate(comm, &s), comm, "stream create");
    std::vector<float> x(kChain), y(kChain, -1.0f), z(kChain, -1.0f);
    auto xv = [](int q, size_t j) { return static_cast<float>(static_cast<int>((j * 7 + static_cast<size_t>(q) * 3) % 5) - 2); };
    for (size_t j = 0; j < kChain; ++j) x[j] = xv(r, j);
    check(chorusAllReduce(x.data(), y.data(), kChain, chorusFloat32, chorusSum, comm, s), comm, "chain allreduce 1");
    check(chorusAllReduce(y.data(), y.data(), kChain, chorusFloat32, chorusSum, comm, s), comm, "chain allreduce 2");
    check(chorusBroadcast(y.data(), y.data(), kChain, chorusFloat32, n - 1, comm, s), comm, "chain broadcast");
    check(chorusReduce(y.data(), z.data(), kChain, chorusFloat32, chorusMax, 0, comm, s), comm, "chain reduce");
    check(chorusStreamSynchronize(s), comm, "chain synchronize");
    check(chorusStreamDestroy(s), comm, "stream destroy");
    for (size_t j = 0; j < kChain; ++j) {
      float S = 0;
      for (int q = 0; q < n; ++q) S += xv(q, j);
      const float want = S * static_cast<float>(n);
      if (y[j] != want || (r == 0 && z[j] != want) || (r != 0 && z[j] != -1.0f)) {
        rep.add("chain nranks=" + std::to_string(n) + " rank=" + std::to_string(r) + ": index " + std::to_string(j) +
                " expected " + std::to_string(want) + ", y " + std::to_string(y[j]) + ", z " + std::to_string(z[j]));
        break;
      }
    }
    rep.throwIfAny();
  });
  EXPECT_TRUE(errors.empty()) << "nranks=" << n << ":" << joined(errors);
}

INSTANTIATE_TEST_SUITE_P(Ranks, QueuedMixed, ::testing::Values(1, 2, 3, 4, 5, 8));

// ------------------------------------------------------------------------------------------------------------
// Avg of float16 and bfloat16 pre-multiplies (Note [PreMulSum] in lib/comm/collectives.cc): an average the type
// holds comes out even where the sum of the inputs does not fit (float16: 2 x 40000 > 65504; bfloat16: 2 x 2^127
// > its largest, 2^128 - 2^120), through AllReduce, Reduce and ReduceScatter. Summing first gave inf.

class AvgNearTheTop : public ::testing::TestWithParam<int> {};

TEST_P(AvgNearTheTop, Float16AndBfloat16AveragesOfValuesWhoseSumOverflows) {
  const int n = GetParam();
  struct Type {
    chorusDataType_t dt;
    uint16_t big;  // the input of every rank, and the average
  };
  const Type types[] = {{chorusFloat16, floatToHalf(40000.0f)}, {chorusBfloat16, floatToBf16(0x1p127f)}};
  auto errors = runRanks(n, [&](int r, chorusComm_t& comm) {
    for (const Type& t : types) {
      const size_t count = 1001;  // odd, and several per rank for ReduceScatter
      std::vector<uint16_t> send(count * static_cast<size_t>(n), t.big), out(count * static_cast<size_t>(n), 0);
      auto expectAll = [&](const char* what, const uint16_t* p, size_t m) {
        for (size_t i = 0; i < m; ++i)
          if (p[i] != t.big)
            throw std::runtime_error(std::string(what) + " " + typeName(t.dt) + ": element " + std::to_string(i) +
                                     " is " + showRaw(t.dt, p[i]) + ", not " + showRaw(t.dt, t.big));
      };
      check(chorusAllReduce(send.data(), out.data(), count, t.dt, chorusAvg, comm, nullptr), comm, "allreduce");
      expectAll("AllReduce", out.data(), count);
      check(chorusAllReduce(send.data(), send.data(), count, t.dt, chorusAvg, comm, nullptr), comm, "in place");
      expectAll("AllReduce in place", send.data(), count);
      check(chorusReduce(send.data(), out.data(), count, t.dt, chorusAvg, 0, comm, nullptr), comm, "reduce");
      if (r == 0) expectAll("Reduce", out.data(), count);
      check(chorusReduceScatter(send.data(), out.data(), count, t.dt, chorusAvg, comm, nullptr), comm, "scatter");
      expectAll("ReduceScatter", out.data(), count);
    }
  });
  EXPECT_TRUE(errors.empty()) << "nranks=" << n << ":" << joined(errors);
}

INSTANTIATE_TEST_SUITE_P(Ranks, AvgNearTheTop, ::testing::Values(1, 2, 4));

// ------------------------------------------------------------------------------------------------------------
// 16 Mi elements: float32 sum AllReduce at nranks 2, 4, 8 (the reference is computed once, on this thread), and
// one out-of-place AllGather / ReduceScatter of 64 MiB in total.

constexpr size_t k16Mi = size_t{16} << 20;

class Large : public ::testing::TestWithParam<int> {};

TEST_P(Large, AllReduceFloat32Sum16Mi) {
  const int n = GetParam();
  Case c;
  c.coll = Coll::AllReduce;
  c.dt = chorusFloat32;
  c.op = chorusSum;
  c.count = k16Mi;
  c.inPlace = n == 4;
  c.mode = n == 8 ? Mode::Stream : Mode::Blocking;
  c.seed = mix(0x16u + static_cast<uint64_t>(n));
  std::vector<double> ref(k16Mi);
  for (size_t j = 0; j < k16Mi; ++j) {
    double s = 0;
    for (int q = 0; q < n; ++q) s += rawToDouble(chorusFloat32, inputRaw(chorusFloat32, chorusSum, c.seed, q, j));
    ref[j] = s;
  }
  c.reference = &ref;
  auto errors = runRanks(n, [&](int r, chorusComm_t& comm) {
    Report rep;
    runCases<Running>(r, n, comm, std::vector<Case>{c}, rep);
    rep.throwIfAny();
  });
  EXPECT_TRUE(errors.empty()) << joined(errors);
}

INSTANTIATE_TEST_SUITE_P(Ranks, Large, ::testing::Values(2, 4, 8));

TEST(LargeGatherScatter, OutOfPlace64MiB) {
  const int n = 4;
  std::vector<Case> cases(2);
  cases[0].coll = Coll::AllGather;
  cases[1].coll = Coll::ReduceScatter;
  for (size_t i = 0; i < 2; ++i) {
    cases[i].dt = chorusFloat32;
    cases[i].op = chorusSum;
    cases[i].count = k16Mi / n;  // 16 Mi float32 = 64 MiB gathered / scattered in total
    cases[i].seed = mix(0x64u + i);
  }
  auto errors = runRanks(n, [&](int r, chorusComm_t& comm) {
    Report rep;
    runCases<Running>(r, n, comm, cases, rep);
    rep.throwIfAny();
  });
  EXPECT_TRUE(errors.empty()) << joined(errors);
}

// One group of 1500 messages of 0..300 bytes from rank 0 to rank 1, posted while rank 1 is still asleep: they
// pile up in the transport (UCX's small sends leave from the stack only while UCX can take them at once, then
// queue behind the ones it could not), and each must arrive in order with its own bytes.
TEST(Burst, ManySmallSendsBeforeTheReceiverPostsArriveInOrder) {
  constexpr int kMessages = 1500;
  auto size = [](int i) { return static_cast<size_t>(i * 37 % 301); };
  auto byte = [](int i, size_t j) { return static_cast<uint8_t>(i * 131 + j * 7 + 1); };
  auto errors = runRanks(2, [&](int r, chorusComm_t& comm) {
    std::vector<std::vector<uint8_t>> bufs(kMessages);
    for (int i = 0; i < kMessages; ++i) {
      bufs[i].assign(size(i), 0);
      if (r == 0)
        for (size_t j = 0; j < size(i); ++j) bufs[i][j] = byte(i, j);
    }
    if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    check(chorusGroupStart(), comm, "group start");
    for (int i = 0; i < kMessages; ++i) {
      if (r == 0) check(chorusSend(bufs[i].data(), size(i), chorusUint8, 1, comm, nullptr), comm, "send");
      else check(chorusRecv(bufs[i].data(), size(i), chorusUint8, 0, comm, nullptr), comm, "recv");
    }
    check(chorusGroupEnd(), comm, "group end");
    if (r == 0) return;
    for (int i = 0; i < kMessages; ++i)
      for (size_t j = 0; j < size(i); ++j)
        if (bufs[i][j] != byte(i, j))
          throw std::runtime_error("message " + std::to_string(i) + " byte " + std::to_string(j) + " is " +
                                   std::to_string(bufs[i][j]) + ", expected " + std::to_string(byte(i, j)));
  });
  EXPECT_TRUE(errors.empty()) << joined(errors);
}

}  // namespace
