// Recursive-doubling allreduce for small messages: log2(n) exchanges of the whole buffer instead of the
// ring's 2(n-1) latency steps. Ranks are folded onto a power of two p (algorithms/fold.h); active rank a
// exchanges with a XOR 2^k at step k.
// Both partners combine the same two partial results, and IEEE addition/multiplication are commutative, so
// every rank ends with bitwise the same values.
#include "algorithms/collective.h"
#include "algorithms/fold.h"
#include "lib/kernels/reduce.h"

namespace chorus::algo {

void recursiveDoublingAllReduce(Context& ctx, const OpTag& tag, const CollArgs& a) {
  const int n = ctx.nranks(), r = ctx.rank();
  const size_t es = kernels::dataTypeSize(a.dtype), bytes = a.count * es;
  auto out = static_cast<uint8_t*>(a.recvbuff);
  a.space.copy(out, a.sendbuff, bytes);
  if (n == 1) return;
  const PowerOfTwoFold fold(n, r);
  uint8_t* tmp = ctx.scratch(a.space, bytes, 2);
  if (!fold.foldIn(ctx, tag, a, out, tmp)) return;
  for (int mask = 1; mask < fold.p(); mask <<= 1) {
    const int peer = fold.realRank(fold.active() ^ mask);
    Request s, v;
    ctx.isend(peer, out, bytes, tag, &s);
    // Reducing into `out` while it is received is only safe once the send no longer reads it (a transport
    // that copies eagerly, shm, is usually done already); otherwise stage in tmp.
    const bool fused = s.done && ctx.irecvReduce(a.space, peer, out, out, bytes, a.dtype, a.op, tag, &v);
    if (!fused) ctx.irecv(peer, tmp, bytes, tag, &v);
    ctx.waitUntil([&] { return s.done && v.done; }, tag);
    if (!fused) a.space.reduce(out, out, tmp, a.count, a.dtype, a.op);
  }
  if (a.op == chorusAvg) a.space.scaleDivide(out, a.count, a.dtype, n);
  fold.foldOut(ctx, tag, a, out);
}

}  // namespace chorus::algo
