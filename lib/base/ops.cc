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
std::string opName(uint8_t v) {
  return v <= chorusAvg ? kernels::redOpName(static_cast<chorusRedOp_t>(v)) : fmt::format("op #{}", v);
}
}  // namespace

std::string describe(const OpTag& t) {
  const std::string dt = typeName(t.dtype), op = opName(t.redop);
  switch (t.kind) {
    case OpKind::Barrier:
      return fmt::format("Barrier (call #{})", t.seq);
    case OpKind::Send:
      return fmt::format("Send/Recv #{} between this pair (count {}, {})", t.seq, t.count, dt);
    case OpKind::Tagged:
      return t.root == kEnvelopeRoot ? fmt::format("the next tagged message between this pair (#{})", t.seq)
                                     : fmt::format("tagged message #{} between this pair ({} bytes)", t.seq, t.count);
    case OpKind::Broadcast:
      return fmt::format("Broadcast (call #{}, count {}, {}, root {})", t.seq, t.count, dt, t.root);
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
