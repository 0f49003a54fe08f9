// Halving-doubling allreduce (Rabenseifner): a reduce-scatter by recursive halving, then an all-gather by
// recursive doubling. Each rank sends 2(p-1)/p of the buffer, like the ring, but in 2*log2(p) steps instead of
// 2(n-1), which wins for mid-sized messages, above all when ranks share cores and every step costs a wake-up.
// Ranks are folded onto a power of two p (algorithms/fold.h). The buffer is cut into p blocks (ring.h's balanced
// segments); at halving step `mask` an active rank keeps the half of its current block range on its side of bit
// `mask` and sends the other half to active ^ mask. Every block is reduced by exactly one rank and then only
// copied, so all ranks end with bitwise identical values.
#include <cstring>

#include "algorithms/collective.h"
#include "algorithms/fold.h"
#include "algorithms/ring.h"
#include "lib/kernels/reduce.h"

namespace chorus::algo {

void halvingDoublingAllReduce(Comm& comm, const OpTag& tag, const CollArgs& a) {
  const int n = comm.nranks(), r = comm.rank();
  const size_t es = kernels::dataTypeSize(a.dtype), bytes = a.count * es;
  auto out = static_cast<uint8_t*>(a.recvbuff);
  if (a.sendbuff != a.recvbuff) std::memmove(out, a.sendbuff, bytes);
  if (n == 1) return;
  const PowerOfTwoFold fold(n, r);
  const int p = fold.p(), active = fold.active();
  auto off = [&](int block) { return segmentOffset(a.count, p, block) * es; };
  uint8_t* tmp = comm.scratch(bytes, 2);
  if (!fold.foldIn(comm, tag, a, out, tmp)) return;

  int lo = 0, hi = p;  // blocks this rank is still responsible for
  for (int mask = p / 2; mask >= 1; mask /= 2) {
    const int peer = fold.realRank(active ^ mask), mid = (lo + hi) / 2;
    const bool upper = (active & mask) != 0;
    const int keepLo = upper ? mid : lo, keepHi = upper ? hi : mid;
    const int giveLo = upper ? lo : mid, giveHi = upper ? mid : hi;
    Request s, v;
    uint8_t* keep = out + off(keepLo);
    const size_t keepBytes = off(keepHi) - off(keepLo);
    // The kept half is never sent at this step, so it can be reduced into while it arrives.
    const bool fused = comm.irecvReduce(peer, keep, keep, keepBytes, a.dtype, a.op, tag, &v);
    if (!fused) comm.irecv(peer, tmp + off(keepLo), keepBytes, tag, &v);
    comm.isend(peer, out + off(giveLo), off(giveHi) - off(giveLo), tag, &s);
    comm.waitUntil([&] { return s.done && v.done; }, tag);
    if (!fused) kernels::reduce(keep, keep, tmp + off(keepLo), keepBytes / es, a.dtype, a.op);
    lo = keepLo;
    hi = keepHi;
  }
  if (a.op == chorusAvg) kernels::scaleDivide(out + off(lo), (off(hi) - off(lo)) / es, a.dtype, n);
  for (int mask = 1; mask < p; mask *= 2) {
    const int peer = fold.realRank(active ^ mask), size = hi - lo;
    const bool upper = (active & mask) != 0;
    const int theirLo = upper ? lo - size : hi, theirHi = theirLo + size;
    Request s, v;
    comm.irecv(peer, out + off(theirLo), off(theirHi) - off(theirLo), tag, &v);
    comm.isend(peer, out + off(lo), off(hi) - off(lo), tag, &s);
    comm.waitUntil([&] { return s.done && v.done; }, tag);
    lo = upper ? theirLo : lo;
    hi = upper ? hi : theirHi;
  }
  fold.foldOut(comm, tag, a, out);
}

}  // namespace chorus::algo
