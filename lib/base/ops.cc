#include "lib/base/ops.h"

#include <fmt/format.h>

#include "lib/kernels/reduce.h"

namespace chorus {

const char* opKindName(OpKind k) {
  switch (k) {
    case OpKind::AllReduce: return "AllReduce";
    case OpKind::Broadcast: return "Broadcast";
    case OpKind::Reduce: return "Reduce";
    case OpKind::AllGather: return "AllGather";
    case OpKind::ReduceScatter: return "ReduceScatter";
    case OpKind::AllToAll: return "AllToAll";
    case OpKind::AllToAllv: return "AllToAllv";
    case OpKind::Send: return "Send/Recv";
    case OpKind::Barrier: return "Barrier";
    case OpKind::Tagged: return "tagged Send/Recv";
    case OpKind::Gather: return "Gather";
    case OpKind::Scatter: return "Scatter";
    case OpKind::AllGatherV: return "AllGatherV";
    case OpKind::ReduceScatterV: return "ReduceScatterV";
    case OpKind::None: break;
  }
  return "an unknown operation";
}

namespace {
// A tag may come off the wire with any byte there: only a valid one becomes the C enum (another value would be
// undefined behaviour to load as one).
std::string typeName(uint8_t v) {
  return v <= chorusBfloat16 ? kernels::dataTypeName(static_cast<chorusDataType_t>(v)) : fmt::format("datatype #{}", v);
}
// "recvcounts totalling 12 (fingerprint 3fa2c1)"; a saturated total is a lower bound.
std::string countsText(uint64_t tag) {
  const uint64_t total = countsTotal(tag);
  const bool saturated = total == countsTotal(~uint64_t{0});
  return fmt::format("recvcounts totalling {}{} (fingerprint {:06x})", saturated ? "at least " : "", total,
                     countsFingerprint(tag));
}
}  // namespace

std::string redOpTagName(uint8_t v) {
  if (v < chorusNumOps) return kernels::redOpName(static_cast<chorusRedOp_t>(v));
  return v == kPreMulSumTag ? "premulsum" : fmt::format("op #{}", v);
}

uint64_t countsTag(const size_t* counts, size_t n) {
  uint64_t total = 0, h = 0xcbf29ce484222325ull;  // FNV-1a over the counts
  constexpr uint64_t kMaxTotal = (uint64_t{1} << kCountsTotalBits) - 1;
  for (size_t i = 0; i < n; ++i) {
    total = counts[i] > kMaxTotal - total ? kMaxTotal : total + counts[i];
    for (int b = 0; b < 64; b += 8) h = (h ^ ((counts[i] >> b) & 0xff)) * 0x100000001b3ull;
  }
  const uint64_t fingerprint = (h ^ (h >> 24) ^ (h >> 48)) & 0xffffff;
  return fingerprint << kCountsTotalBits | total;
}

std::string describe(const OpTag& t) {
  const std::string dt = typeName(t.dtype), op = redOpTagName(t.redop);
  switch (t.kind) {
    case OpKind::Barrier:
      return fmt::format("Barrier (call #{})", t.seq);
    case OpKind::Send:
      return fmt::format("Send/Recv #{} between this pair (count {}, {})", t.seq, t.count, dt);
    case OpKind::Tagged:
      return t.root == kEnvelopeRoot ? fmt::format("the next tagged message between this pair (#{})", t.seq)
                                     : fmt::format("tagged message #{} between this pair ({} bytes)", t.seq, t.count);
    case OpKind::Broadcast:
    case OpKind::Gather:
    case OpKind::Scatter:
      return fmt::format("{} (call #{}, count {}, {}, root {})", opKindName(t.kind), t.seq, t.count, dt, t.root);
    case OpKind::AllGatherV:
      return fmt::format("AllGatherV (call #{}, {}, {})", t.seq, countsText(t.count), dt);
    case OpKind::ReduceScatterV:
      return fmt::format("ReduceScatterV (call #{}, {}, {}, {})", t.seq, countsText(t.count), dt, op);
    case OpKind::Reduce:
      return fmt::format("Reduce (call #{}, count {}, {}, {}, root {})", t.seq, t.count, dt,
                         op, t.root);
    case OpKind::AllToAllv:
      return fmt::format("AllToAllv (call #{}, {})", t.seq, dt);
    case OpKind::AllGather:
    case OpKind::AllToAll:
      return fmt::format("{} (call #{}, count {}, {})", opKindName(t.kind), t.seq, t.count, dt);
    default:
      return fmt::format("{} (call #{}, count {}, {}, {})", opKindName(t.kind), t.seq, t.count,
                         dt, op);
  }
}

}  // namespace chorus
