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

std::string describe(const OpTag& t) {
  auto dt = static_cast<chorusDataType_t>(t.dtype);
  auto op = static_cast<chorusRedOp_t>(t.redop);
  switch (t.kind) {
    case OpKind::Barrier:
      return fmt::format("Barrier (call #{})", t.seq);
    case OpKind::Send:
      return fmt::format("Send/Recv #{} between this pair (count {}, {})", t.seq, t.count, kernels::dataTypeName(dt));
    case OpKind::Tagged:
      return t.root == kEnvelopeRoot ? fmt::format("the next tagged message between this pair (#{})", t.seq)
                                     : fmt::format("tagged message #{} between this pair ({} bytes)", t.seq, t.count);
    case OpKind::Broadcast:
      return fmt::format("Broadcast (call #{}, count {}, {}, root {})", t.seq, t.count, kernels::dataTypeName(dt), t.root);
    case OpKind::Reduce:
      return fmt::format("Reduce (call #{}, count {}, {}, {}, root {})", t.seq, t.count, kernels::dataTypeName(dt),
                         kernels::redOpName(op), t.root);
    case OpKind::AllToAllv:
      return fmt::format("AllToAllv (call #{}, {})", t.seq, kernels::dataTypeName(dt));
    case OpKind::AllGather:
    case OpKind::AllToAll:
      return fmt::format("{} (call #{}, count {}, {})", opKindName(t.kind), t.seq, t.count, kernels::dataTypeName(dt));
    default:
      return fmt::format("{} (call #{}, count {}, {}, {})", opKindName(t.kind), t.seq, t.count,
                         kernels::dataTypeName(dt), kernels::redOpName(op));
  }
}

}  // namespace chorus
