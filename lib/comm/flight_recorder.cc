#include "lib/comm/flight_recorder.h"

#include <time.h>

#include <fmt/format.h>

#include "algorithms/cost_model.h"
#include "lib/kernels/reduce.h"

namespace chorus {

namespace {

// The kernel's tick (CLOCK_MONOTONIC_COARSE, 1-4 ms): enough to say how long a stuck operation has waited, at a
// few ns instead of CLOCK_MONOTONIC's 20.
int64_t coarseNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

const char* algorithmName(OpKind kind, uint8_t code) {
  if (code != 0) return algo::algoName(static_cast<algo::AllReduceAlgo>(code - 1));
  switch (kind) {
    case OpKind::AllGather:
    case OpKind::ReduceScatter:
    case OpKind::AllGatherV:
    case OpKind::ReduceScatterV: return "ring";
    case OpKind::Broadcast:
    case OpKind::Reduce: return "chain";
    case OpKind::AllToAll:
    case OpKind::AllToAllv:
    case OpKind::Gather:
    case OpKind::Scatter: return "direct";
    case OpKind::Barrier: return "dissemination";
    case OpKind::Send: return "point-to-point";
    default: return "not chosen yet";
  }
}

}  // namespace

FlightRecorder::FlightRecorder(size_t capacity)
    : capacity_(capacity), slots_(capacity != 0 ? std::make_unique<Slot[]>(capacity) : nullptr) {}

void FlightRecorder::begin(const OpTag& tag, uint32_t calls) noexcept {
  if (capacity_ == 0) return;
  const uint64_t n = next_.load(std::memory_order_relaxed);
  Slot& s = slots_[n % capacity_];
  const uint64_t v = s.version.load(std::memory_order_relaxed);
  s.version.store(v + 1, std::memory_order_relaxed);
  s.seq.store(tag.seq, std::memory_order_release);
  s.count.store(tag.count, std::memory_order_release);
  s.root.store(tag.root, std::memory_order_release);
  s.kind.store(static_cast<uint8_t>(tag.kind), std::memory_order_release);
  s.dtype.store(tag.dtype, std::memory_order_release);
  s.redop.store(tag.redop, std::memory_order_release);
  s.calls.store(calls, std::memory_order_release);
  s.algo.store(0, std::memory_order_release);
  s.state.store(kRunning, std::memory_order_release);
  s.startNs.store(coarseNs(), std::memory_order_release);
  s.endNs.store(0, std::memory_order_release);
  s.recvPeer.store(-1, std::memory_order_release);
  s.recvBytes.store(0, std::memory_order_release);
  s.version.store(v + 2, std::memory_order_release);
  next_.store(n + 1, std::memory_order_release);
  cur_ = &s;
}

void FlightRecorder::end(bool ok) noexcept {
  if (cur_ == nullptr) return;
  cur_->endNs.store(coarseNs(), std::memory_order_relaxed);
  cur_->state.store(ok ? kDone : kFailed, std::memory_order_release);
  cur_ = nullptr;
}

std::string FlightRecorder::json() const {
  if (capacity_ == 0) return "[]";
  const int64_t now = coarseNs();
  const uint64_t n = next_.load(std::memory_order_acquire);
  const uint64_t first = n > capacity_ ? n - capacity_ : 0;
  std::string out = "[";
  for (uint64_t i = first; i < n; ++i) {
    const Slot& s = slots_[i % capacity_];
    uint64_t seq, count, recvBytes;
    int64_t startNs, endNs;
    int32_t root, recvPeer;
    uint32_t calls;
    uint8_t kind, dtype, redop, algo, state;
    for (int attempt = 0;; ++attempt) {
      const uint64_t v1 = s.version.load(std::memory_order_acquire);
      seq = s.seq.load(std::memory_order_acquire);
      count = s.count.load(std::memory_order_acquire);
      recvBytes = s.recvBytes.load(std::memory_order_acquire);
      startNs = s.startNs.load(std::memory_order_acquire);
      endNs = s.endNs.load(std::memory_order_acquire);
      root = s.root.load(std::memory_order_acquire);
      recvPeer = s.recvPeer.load(std::memory_order_acquire);
      calls = s.calls.load(std::memory_order_acquire);
      kind = s.kind.load(std::memory_order_acquire);
      dtype = s.dtype.load(std::memory_order_acquire);
      redop = s.redop.load(std::memory_order_acquire);
      algo = s.algo.load(std::memory_order_acquire);
      state = s.state.load(std::memory_order_acquire);
      if ((v1 & 1) == 0 && s.version.load(std::memory_order_relaxed) == v1) break;
      if (attempt == 1000) return out + "]";  // the writer keeps lapping us: what we have
    }
    // A slot rewritten since next_ was read belongs to a later operation: the dump ends before it.
    if (i + capacity_ < next_.load(std::memory_order_acquire)) continue;
    const auto k = static_cast<OpKind>(kind);
    const bool collective = k != OpKind::Send;
    if (out.size() > 1) out += ',';
    // The V kinds' count: the total of their counts (Note [Counts in tags]).
    out += fmt::format(R"({{"seq":{},"op":"{}","count":{},"dtype":"{}")", seq, opKindName(k),
                       perRankCounts(k) ? countsTotal(count) : count,
                       kernels::dataTypeName(static_cast<chorusDataType_t>(dtype)));
    if (k == OpKind::AllReduce || k == OpKind::Reduce || k == OpKind::ReduceScatter || k == OpKind::ReduceScatterV)
      out += fmt::format(R"(,"redop":"{}")", redOpTagName(redop));
    if (k == OpKind::Broadcast || k == OpKind::Reduce || k == OpKind::Gather || k == OpKind::Scatter)
      out += fmt::format(R"(,"root":{})", root);
    if (!collective) out += fmt::format(R"(,"calls":{})", calls);
    out += fmt::format(R"(,"algo":"{}","state":"{}","started_ms_ago":{:.0f})", algorithmName(k, algo),
                       state == kRunning ? "running" : state == kDone ? "done" : "failed", (now - startNs) / 1e6);
    if (state != kRunning) out += fmt::format(R"(,"took_ms":{:.0f})", (endNs - startNs) / 1e6);
    if (recvPeer >= 0) out += fmt::format(R"(,"last_recv_from":{},"last_recv_bytes":{})", recvPeer, recvBytes);
    out += '}';
  }
  return out + "]";
}

}  // namespace chorus
