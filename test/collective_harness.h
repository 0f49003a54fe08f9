// What the collective matrices (test_collectives.cc, test_gather_scatter.cc) share: buffers between guard bytes
// holding a fill pattern, the check of a buffer's elements against the reference, and the driver that runs a list
// of cases blocking (stream NULL), on a stream (one synchronize per call) or queued back to back on two streams
// (one synchronize per batch).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "test/ranks.h"
#include "test/reference.h"

namespace chorus::test {

constexpr size_t kGuard = 64;

inline uint8_t patternByte(size_t p) { return static_cast<uint8_t>(((p * 167u) + 0x5bu) ^ (p >> 9)); }

// `bytes` bytes at `misalign` bytes past a guard zone, everything filled with the pattern.
class Buf {
 public:
  Buf(size_t bytes, size_t misalign) : pre_(kGuard + misalign), bytes_(bytes), mem_(pre_ + bytes + kGuard) {
    for (size_t p = 0; p < mem_.size(); ++p) mem_[p] = patternByte(p);
  }
  uint8_t* data() { return mem_.data() + pre_; }
  const uint8_t* data() const { return mem_.data() + pre_; }
  size_t bytes() const { return bytes_; }
  // First byte in data()[from, to) (offsets relative to data(), may be negative) not holding the pattern.
  bool patternIntact(long from, long to, long* bad) const {
    for (long o = from; o < to; ++o) {
      size_t p = static_cast<size_t>(static_cast<long>(pre_) + o);
      if (mem_[p] != patternByte(p)) {
        *bad = o;
        return false;
      }
    }
    return true;
  }
  bool guardsIntact(long* bad) const {
    return patternIntact(-static_cast<long>(pre_), 0, bad) &&
           patternIntact(static_cast<long>(bytes_), static_cast<long>(bytes_ + kGuard), bad);
  }
  uint8_t patternAt(long o) const { return patternByte(static_cast<size_t>(static_cast<long>(pre_) + o)); }

 private:
  size_t pre_, bytes_;
  std::vector<uint8_t> mem_;
};

enum class Mode { Blocking, Stream, Queued };
inline const char* modeName(Mode m) {
  switch (m) {
    case Mode::Blocking: return "blocking";
    case Mode::Stream: return "stream";
    case Mode::Queued: return "queued";
  }
  return "?";
}

// Elements [begin, end) of the buffer at base (of dt) against want(j); reports the first mismatch only, as
// "<who>: <what>[j] expected ..., actual ...".
template <class W>
void expectElems(Report& rep, const std::string& who, chorusDataType_t dt, const char* what, const uint8_t* base,
                 size_t begin, size_t end, W want) {
  const size_t es = typeSize(dt);
  for (size_t j = begin; j < end; ++j) {
    const uint64_t got = readRaw(base + j * es, es);
    const Want w = want(j);
    if (!matches(dt, w, got)) {
      std::string exp = w.cmp == Cmp::Approx ? std::to_string(w.val) + " (within " + std::to_string(w.tol) + ")"
                                             : showRaw(dt, w.raw);
      rep.add(who + ": " + what + "[" + std::to_string(j) + "] expected " + exp + ", actual " + showRaw(dt, got));
      return;
    }
  }
}

// Bytes [from, to) of b (offsets from its data) still hold the fill pattern.
inline void expectPattern(Report& rep, const std::string& who, const char* what, const Buf& b, long from, long to) {
  long bad = 0;
  if (!b.patternIntact(from, to, &bad))
    rep.add(who + ": " + what + ": byte " + std::to_string(bad) + " was written (fill pattern " +
            std::to_string(b.patternAt(bad)) + ", now " + std::to_string(b.data()[bad]) + ")");
}

inline void expectGuards(Report& rep, const std::string& who, const char* what, const Buf* b) {
  long bad = 0;
  if (b != nullptr && !b->guardsIntact(&bad))
    rep.add(who + ": guard byte around " + what + " modified at offset " + std::to_string(bad));
}

// Runs cases in order on this rank: blocking and stream cases one at a time; each run of consecutive Queued cases
// is issued back to back alternately on two streams, synchronised once, then verified. Running(c, n, r) has
// prepare(), issue(comm, stream) and verify(report); describe(c, n, r) names a case.
template <class Running, class Case>
void runCases(int r, int n, chorusComm_t comm, const std::vector<Case>& cases, Report& rep) {
  chorusStream_t s1 = nullptr, s2 = nullptr;
  check(chorusStreamCreate(comm, &s1), comm, "stream create");
  check(chorusStreamCreate(comm, &s2), comm, "stream create");
  for (size_t i = 0; i < cases.size();) {
    const Case& c = cases[i];
    if (c.mode != Mode::Queued) {
      Running run(c, n, r);
      run.prepare();
      run.issue(comm, c.mode == Mode::Stream ? s1 : nullptr);
      if (c.mode == Mode::Stream) {
        check(chorusStreamSynchronize(s1), comm, describe(c, n, r) + ": synchronize");
        chorusResult_t q = chorusStreamQuery(s1);
        if (q != chorusSuccess)
          rep.add(describe(c, n, r) + ": chorusStreamQuery after synchronize returned " + chorusGetErrorString(q));
      }
      run.verify(rep);
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cases.size() && cases[j].mode == Mode::Queued) ++j;
    std::vector<std::unique_ptr<Running>> batch;
    for (size_t k = i; k < j; ++k) {
      batch.push_back(std::make_unique<Running>(cases[k], n, r));
      batch.back()->prepare();
      batch.back()->issue(comm, (k - i) % 2 == 0 ? s1 : s2);
    }
    check(chorusStreamSynchronize(s1), comm, describe(cases[i], n, r) + ": synchronize (queued batch)");
    check(chorusStreamSynchronize(s2), comm, describe(cases[i], n, r) + ": synchronize (queued batch)");
    for (auto& b : batch) b->verify(rep);
    i = j;
  }
  check(chorusStreamDestroy(s1), comm, "stream destroy");
  check(chorusStreamDestroy(s2), comm, "stream destroy");
}

inline std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& e : v) s += "\n  " + e;
  return s;
}

// An op for a call: op itself, or for kPreMulSum one made on comm with this rank's scalar (preMulScalarRaw).
// destroy() it once the call is issued: a call issued keeps its scalar.
class CallOp {
 public:
  CallOp(chorusRedOp_t op, chorusDataType_t dt, int rank, chorusComm_t comm) : op_(op), comm_(comm) {
    if (op != kPreMulSum) return;
    const uint64_t scalar = preMulScalarRaw(dt, rank);
    check(chorusRedOpCreatePreMulSum(&op_, &scalar, dt, comm), comm, "chorusRedOpCreatePreMulSum");
    made_ = true;
  }
  ~CallOp() {
    if (made_) chorusRedOpDestroy(op_, comm_);  // unwinding: the failure is reported already
  }
  void destroy() {
    if (!made_) return;
    made_ = false;
    check(chorusRedOpDestroy(op_, comm_), comm_, "chorusRedOpDestroy");
  }
  CallOp(const CallOp&) = delete;
  CallOp& operator=(const CallOp&) = delete;
  chorusRedOp_t get() const { return op_; }

 private:
  chorusRedOp_t op_;
  chorusComm_t comm_;
  bool made_ = false;
};

}  // namespace chorus::test
