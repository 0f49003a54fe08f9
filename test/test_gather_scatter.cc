// The correctness matrix of Gather, Scatter, AllGatherV and ReduceScatterV (test_collectives.cc's harness,
// test/collective_harness.h): every datatype (and, for ReduceScatterV, every op that applies to it, PreMulSum
// included) x count x placement at 1 to 5 ranks, each case blocking, on a stream or queued (by rotation, so that
// every mode meets every collective, datatype and count), the root rotated over first, last and middle. The
// per-rank counts come in patterns: all zero, some ranks zero, only the last rank's, odd counts at every rank, and
// large uneven blocks (several pipeline chunks) for a few (datatype, op) pairs.
//
// Each case fills its buffers from (seed, rank, index) and checks on every rank the output against the reference
// (test/reference.h), that inputs stay unchanged, that what the API says is not written (a non-root's recvbuff of
// Gather, sendbuff of Scatter) still holds its fill pattern, and the guard bytes around every buffer. About one
// third of the cases misalign every buffer by 1..7 bytes; in half the cases a buffer the call ignores (a
// non-root's, or one of no elements) is NULL.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "test/collective_harness.h"

namespace {

using namespace chorus::test;

enum class Coll { Gather, Scatter, AllGatherV, ReduceScatterV };

const char* collName(Coll c) {
  switch (c) {
    case Coll::Gather: return "Gather";
    case Coll::Scatter: return "Scatter";
    case Coll::AllGatherV: return "AllGatherV";
    case Coll::ReduceScatterV: return "ReduceScatterV";
  }
  return "?";
}

bool rooted(Coll c) { return c == Coll::Gather || c == Coll::Scatter; }

struct Case {
  Coll coll = Coll::Gather;
  chorusDataType_t dt = chorusFloat32;
  chorusRedOp_t op = chorusSum;  // ReduceScatterV only
  std::vector<size_t> counts;    // one per rank (Gather/Scatter: all equal, the call's count)
  bool inPlace = false;
  Mode mode = Mode::Blocking;
  int root = 0;  // Gather / Scatter
  size_t misalign = 0;
  uint64_t seed = 0;
  bool nullUnused = false;  // the buffer the call ignores is NULL (see the top comment)
};

std::string describe(const Case& c, int n, int r) {
  std::string s = std::string(collName(c.coll)) + " nranks=" + std::to_string(n) + " rank=" + std::to_string(r) +
                  " dtype=" + typeName(c.dt);
  if (c.coll == Coll::ReduceScatterV) s += std::string(" op=") + opName(c.op);
  if (rooted(c.coll)) {
    s += " count=" + std::to_string(c.counts[0]) + " root=" + std::to_string(c.root);
  } else {
    s += " counts=[";
    for (size_t p = 0; p < c.counts.size(); ++p) s += (p ? "," : "") + std::to_string(c.counts[p]);
    s += "]";
  }
  s += std::string(" mode=") + modeName(c.mode) + (c.inPlace ? " in-place" : " out-of-place");
  if (c.nullUnused) s += " (unused buffers NULL)";
  return s + " misalign=" + std::to_string(c.misalign);
}

// One case on one rank: buffers, the call, the checks.
class Running {
 public:
  Running(const Case& c, int n, int r)
      : c_(c), n_(n), r_(r), es_(typeSize(c.dt)),
        inOp_(c.coll == Coll::ReduceScatterV ? static_cast<int>(c.op) : kMovement), at_(c.counts.size() + 1) {
    for (size_t p = 0; p < c.counts.size(); ++p) at_[p + 1] = at_[p] + c.counts[p];
  }

  void prepare() {
    const size_t n = static_cast<size_t>(n_), r = static_cast<size_t>(r_), cnt = c_.counts[r], all = at_[n];
    const bool root = r_ == c_.root;
    switch (c_.coll) {
      case Coll::Gather:  // rank r's cnt elements; root's recvbuff n * cnt
        if (c_.inPlace && root) {
          recv_ = make(n * cnt);
          fill(*recv_, r * cnt, cnt, r_);
          sendPtr_ = recv_->data() + r * cnt * es_;
        } else {
          send_ = make(cnt);
          fill(*send_, 0, cnt, r_);
          if (root || !c_.nullUnused) recv_ = make(n * cnt);
        }
        break;
      case Coll::Scatter:  // root's sendbuff n * cnt; everyone's recvbuff cnt
        if (c_.inPlace && root) {
          send_ = make(n * cnt);
          fill(*send_, 0, n * cnt, r_);
          recvPtr_ = send_->data() + r * cnt * es_;
        } else {
          recv_ = make(cnt);
          if (root || !c_.nullUnused) {
            send_ = make(n * cnt);
            if (root) fill(*send_, 0, n * cnt, r_);
          }
        }
        break;
      case Coll::AllGatherV:  // rank r's counts[r] elements; recvbuff every block
        recv_ = make(all);
        if (c_.inPlace) {
          fill(*recv_, at_[r], cnt, r_);
          sendPtr_ = recv_->data() + at_[r] * es_;
        } else if (cnt > 0 || !c_.nullUnused) {
          send_ = make(cnt);
          fill(*send_, 0, cnt, r_);
        }
        break;
      case Coll::ReduceScatterV:  // sendbuff every block; recvbuff block r
        if (c_.inPlace) {
          send_ = make(all);
          fill(*send_, 0, all, r_);
          recvPtr_ = send_->data() + at_[r] * es_;
        } else {
          send_ = make(all);
          fill(*send_, 0, all, r_);
          if (cnt > 0 || !c_.nullUnused) recv_ = make(cnt);
        }
        break;
    }
    if (sendPtr_ == nullptr && send_) sendPtr_ = send_->data();
    if (recvPtr_ == nullptr && recv_) recvPtr_ = recv_->data();
  }

  void issue(chorusComm_t comm, chorusStream_t stream) {
    const chorusDataType_t dt = c_.dt;
    const size_t* counts = c_.counts.data();
    chorusResult_t rc = chorusSuccess;
    switch (c_.coll) {
      case Coll::Gather: rc = chorusGather(sendPtr_, recvPtr_, counts[0], dt, c_.root, comm, stream); break;
      case Coll::Scatter: rc = chorusScatter(sendPtr_, recvPtr_, counts[0], dt, c_.root, comm, stream); break;
      case Coll::AllGatherV: rc = chorusAllGatherV(sendPtr_, recvPtr_, counts, dt, comm, stream); break;
      case Coll::ReduceScatterV: {
        CallOp op(c_.op, dt, r_, comm);
        rc = chorusReduceScatterV(sendPtr_, recvPtr_, counts, dt, op.get(), comm, stream);
        if (rc == chorusSuccess) op.destroy();  // a call issued keeps its scalar: this changes nothing
        break;
      }
    }
    check(rc, comm, describe(c_, n_, r_));
  }

  void verify(Report& rep) const {
    const size_t n = static_cast<size_t>(n_), r = static_cast<size_t>(r_), cnt = c_.counts[r], all = at_[n];
    const std::string who = describe(c_, n_, r_);
    auto input = [&](int q, size_t off) {  // element j holds input(q, j - off), bit for bit
      return [=, this](size_t j) { return Want{inputRaw(c_.dt, inOp_, c_.seed, q, j - off), 0, Cmp::Bytes}; };
    };
    auto elems = [&](const char* what, const uint8_t* base, size_t begin, size_t end, auto want) {
      expectElems(rep, who, c_.dt, what, base, begin, end, want);
    };
    const bool root = r_ == c_.root;
    switch (c_.coll) {
      case Coll::Gather:
        if (root)
          for (size_t p = 0; p < n; ++p)
            elems("recvbuff (root)", recv_->data(), p * cnt, (p + 1) * cnt, input(static_cast<int>(p), p * cnt));
        else if (recv_)
          expectPattern(rep, who, "recvbuff of a non-root (never written)", *recv_, 0, static_cast<long>(recv_->bytes()));
        if (send_) elems("sendbuff (unchanged)", send_->data(), 0, cnt, input(r_, 0));
        break;
      case Coll::Scatter:
        if (c_.inPlace && root) {
          elems("sendbuff (in place: unchanged)", send_->data(), 0, n * cnt, input(r_, 0));
          break;
        }
        elems("recvbuff", recv_->data(), 0, cnt, [&](size_t j) {
          return Want{inputRaw(c_.dt, inOp_, c_.seed, c_.root, r * cnt + j), 0, Cmp::Bytes};
        });
        if (root) elems("sendbuff (unchanged)", send_->data(), 0, n * cnt, input(r_, 0));
        else if (send_)
          expectPattern(rep, who, "sendbuff of a non-root (never read nor written)", *send_, 0,
                        static_cast<long>(send_->bytes()));
        break;
      case Coll::AllGatherV:
        for (size_t p = 0; p < n; ++p)
          elems("recvbuff", recv_->data(), at_[p], at_[p + 1], input(static_cast<int>(p), at_[p]));
        if (send_) elems("sendbuff (unchanged)", send_->data(), 0, cnt, input(r_, 0));
        break;
      case Coll::ReduceScatterV: {
        auto reduced = [&](size_t j) {
          const size_t k = at_[r] + j;  // element j of block r: index k of every rank's sendbuff
          return referenceReduce(c_.dt, c_.op, n_, [&](int q) { return inputRaw(c_.dt, inOp_, c_.seed, q, k); });
        };
        if (c_.inPlace) {
          elems("sendbuff block (unchanged)", send_->data(), 0, at_[r], input(r_, 0));
          expectElems(rep, who, c_.dt, "recvbuff (= sendbuff block rank)", send_->data() + at_[r] * es_, 0, cnt,
                      reduced);
          elems("sendbuff block (unchanged)", send_->data(), at_[r + 1], all, input(r_, 0));
        } else {
          if (recv_) elems("recvbuff", recv_->data(), 0, cnt, reduced);
          elems("sendbuff (unchanged)", send_->data(), 0, all, input(r_, 0));
        }
        break;
      }
    }
    expectGuards(rep, who, "sendbuff", send_.get());
    expectGuards(rep, who, "recvbuff", recv_.get());
  }

 private:
  std::unique_ptr<Buf> make(size_t elements) const { return std::make_unique<Buf>(elements * es_, c_.misalign); }
  // Elements [first, first + count) of b get input(q, k) for k from 0.
  void fill(Buf& b, size_t first, size_t count, int q) const {
    for (size_t k = 0; k < count; ++k)
      writeRaw(b.data() + (first + k) * es_, es_, inputRaw(c_.dt, inOp_, c_.seed, q, k));
  }

  const Case c_;
  const int n_, r_;
  const size_t es_;
  const int inOp_;
  std::vector<size_t> at_;  // block p of a V kind starts at at_[p] elements
  std::unique_ptr<Buf> send_, recv_;
  const void* sendPtr_ = nullptr;
  void* recvPtr_ = nullptr;
};

// ------------------------------------------------------------------------------------------------------------
// The cases of one collective at one nranks.

// The per-rank counts of the V kinds (see the top comment); the large one only for the pairs in `large` below.
std::vector<std::vector<size_t>> countPatterns(int n) {
  const size_t un = static_cast<size_t>(n);
  std::vector<std::vector<size_t>> v(4, std::vector<size_t>(un, 0));  // [0]: all zero
  for (size_t p = 0; p < un; ++p) {
    v[1][p] = p % 3 == 1 ? 0 : 2 * p + 1;  // ranks 1, 4, ... give nothing
    v[3][p] = (5 * p + 3) % 9 + p;         // odd and even, none zero
  }
  v[2][un - 1] = 13;  // only the last rank's
  return v;
}
std::vector<size_t> largeCounts(int n) {
  std::vector<size_t> v;
  for (int p = 0; p < n; ++p) v.push_back(p == 1 ? 0 : 250007 + 77773 * static_cast<size_t>(p));
  return v;
}

std::vector<Case> matrixCases(Coll coll, int n) {
  std::vector<Case> cases;
  const Mode modes[] = {Mode::Blocking, Mode::Stream, Mode::Queued};
  const int roots[] = {0, n - 1, n / 2};
  auto add = [&](Case c) {
    c.coll = coll;
    c.seed = mix(static_cast<uint64_t>(coll) * 1000003u + cases.size() * 7919u + static_cast<uint64_t>(n));
    c.misalign = (c.seed >> 8) % 3 == 0 ? 1 + (c.seed >> 16) % 7 : 0;
    c.nullUnused = ((c.seed >> 24) & 1) != 0;
    c.mode = modes[(cases.size() / 8) % 3];  // in runs of 8: queued ones go as batches
    c.root = roots[cases.size() % 3];
    cases.push_back(c);
  };
  std::vector<std::vector<size_t>> patterns;
  if (rooted(coll))
    for (size_t count : {0, 1, 7, 1000}) patterns.push_back(std::vector<size_t>(static_cast<size_t>(n), count));
  else
    patterns = countPatterns(n);
  for (const auto& counts : patterns)
    for (chorusDataType_t dt : kAllTypes) {
      const std::vector<chorusRedOp_t> ops =
          coll == Coll::ReduceScatterV ? opsFor(dt) : std::vector<chorusRedOp_t>{chorusSum};
      for (chorusRedOp_t op : ops)
        for (bool inPlace : {false, true}) add({.dt = dt, .op = op, .counts = counts, .inPlace = inPlace});
    }
  // Large blocks (several pipeline chunks, a rank with none): a few pairs, blocking, on a stream, then queued.
  const std::pair<chorusDataType_t, chorusRedOp_t> large[] = {
      {chorusFloat32, chorusSum}, {chorusInt64, chorusBxor}, {chorusBfloat16, kPreMulSum}};
  for (const auto& [dt, op] : large) {
    const std::vector<size_t> counts =
        rooted(coll) ? std::vector<size_t>(static_cast<size_t>(n), 300007) : largeCounts(n);
    add({.dt = dt, .op = coll == Coll::ReduceScatterV ? op : chorusSum, .counts = counts, .inPlace = cases.size() % 2 == 1});
  }
  return cases;
}

class GatherScatter : public ::testing::TestWithParam<std::tuple<Coll, int>> {};

TEST_P(GatherScatter, Matrix) {
  const Coll coll = std::get<0>(GetParam());
  const int n = std::get<1>(GetParam());
  const std::vector<Case> cases = matrixCases(coll, n);
  auto errors = runRanks(n, [&](int r, chorusComm_t& comm) {
    Report rep;
    runCases<Running>(r, n, comm, cases, rep);
    rep.throwIfAny();
  });
  EXPECT_TRUE(errors.empty()) << collName(coll) << " nranks=" << n << ":" << joined(errors);
}

INSTANTIATE_TEST_SUITE_P(All, GatherScatter,
                         ::testing::Combine(::testing::Values(Coll::Gather, Coll::Scatter, Coll::AllGatherV,
                                                              Coll::ReduceScatterV),
                                            ::testing::Values(1, 2, 3, 4, 5)),
                         [](const auto& info) {
                           return std::string(collName(std::get<0>(info.param))) + "_n" +
                                  std::to_string(std::get<1>(info.param));
                         });

}  // namespace
