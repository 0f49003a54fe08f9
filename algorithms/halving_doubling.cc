// Halving-doubling allreduce (Rabenseifner): a reduce-scatter by recursive halving, then an all-gather by
// recursive doubling. Each rank sends 2(p-1)/p of the buffer, like the ring, but in 2*log2(p) steps instead of
// 2(n-1), which wins for mid-sized messages, above all when ranks share cores and every step costs a wake-up.
// Ranks are folded onto a power of two p (algorithms/fold.h). The buffer is cut into p blocks (ring.h's balanced
// segments); at halving step `mask` an active rank keeps the half of its current block range on its side of bit
// `mask` and sends the other half to active ^ mask. Every block is reduced by exactly one rank and then only
// copied, so all ranks end with bitwise identical values.
#include <algorithm>
#include <vector>

#include "algorithms/collective.h"
#include "algorithms/fold.h"
#include "algorithms/ring.h"
#include "lib/kernels/reduce.h"

namespace chorus::algo {

namespace {

// Sends `give` and receives `keepBytes` from peer, both cut into pieces of `piece` bytes (both sides cut the
// same way: the peer's give is our keep). staging != nullptr: the received bytes are reduced into `keep`,
// in place where the transport can (the kept range is never sent at this step), else through staging.
void exchange(Context& ctx, const OpTag& tag, const CollArgs& a, int peer, size_t piece, const uint8_t* give,
              size_t giveBytes, uint8_t* keep, size_t keepBytes, uint8_t* staging) {
  const size_t es = kernels::dataTypeSize(a.dtype);
  const size_t nRecv = std::max<size_t>(1, (keepBytes + piece - 1) / piece);
  const size_t nSend = std::max<size_t>(1, (giveBytes + piece - 1) / piece);
  std::vector<Request> recvs(nRecv), sends(nSend);
  std::vector<bool> fused(nRecv, false);
  for (size_t i = 0; i < nRecv; ++i) {
    const size_t at = i * piece, len = std::min(piece, keepBytes - std::min(keepBytes, at));
    if (staging == nullptr) {
      ctx.irecv(peer, keep + at, len, tag, &recvs[i]);
    } else {
      fused[i] = ctx.irecvReduce(a.space, peer, keep + at, keep + at, len, a.dtype, a.op, tag, &recvs[i]);
      if (!fused[i]) ctx.irecv(peer, staging + at, len, tag, &recvs[i]);
    }
  }
  for (size_t i = 0; i < nSend; ++i) {
    const size_t at = i * piece, len = std::min(piece, giveBytes - std::min(giveBytes, at));
    ctx.isend(peer, give + at, len, tag, &sends[i]);
  }
  for (size_t i = 0; i < nRecv; ++i) {
    ctx.wait(recvs[i], tag);
    const size_t at = i * piece, len = std::min(piece, keepBytes - std::min(keepBytes, at));
    if (staging != nullptr && !fused[i]) a.space.reduce(keep + at, keep + at, staging + at, len / es, a.dtype, a.op);
  }
  ctx.waitUntil([&] { return std::all_of(sends.begin(), sends.end(), [](const Request& q) { return q.done; }); },
                 tag);
}

}  // namespace

void halvingDoublingAllReduce(Context& ctx, const OpTag& tag, const CollArgs& a) {
  const int n = ctx.nranks(), r = ctx.rank();
  const size_t es = kernels::dataTypeSize(a.dtype), bytes = a.count * es;
  auto out = static_cast<uint8_t*>(a.recvbuff);
  a.space.copy(out, a.sendbuff, bytes);
  if (n == 1) return;
  const PowerOfTwoFold fold(n, r);
  const int p = fold.p(), active = fold.active();
  auto off = [&](int block) { return segmentOffset(a.count, p, block) * es; };
  uint8_t* tmp = ctx.scratch(a.space, bytes, 2);
  if (!fold.foldIn(ctx, tag, a, out, tmp)) return;

  // Each exchange travels in pieces of the pipeline chunk: over TCP a piece then fills whole segments (Note [Chunk
  // and segments] in transports/tcp/tcp_transport.h), and a received piece is reduced while the next one arrives.
  const size_t piece = std::max<size_t>(es, ctx.chunkBytes(bytes) / es * es);
  int lo = 0, hi = p;  // blocks this rank is still responsible for
  for (int mask = p / 2; mask >= 1; mask /= 2) {
    const int peer = fold.realRank(active ^ mask), mid = (lo + hi) / 2;
    const bool upper = (active & mask) != 0;
    const int keepLo = upper ? mid : lo, keepHi = upper ? hi : mid;
    const int giveLo = upper ? lo : mid, giveHi = upper ? mid : hi;
    exchange(ctx, tag, a, peer, piece, out + off(giveLo), off(giveHi) - off(giveLo), out + off(keepLo),
             off(keepHi) - off(keepLo), tmp + off(keepLo));
    lo = keepLo;
    hi = keepHi;
  }
  if (a.op == chorusAvg) a.space.scaleDivide(out + off(lo), (off(hi) - off(lo)) / es, a.dtype, n);
  for (int mask = 1; mask < p; mask *= 2) {
    const int peer = fold.realRank(active ^ mask), size = hi - lo;
    const bool upper = (active & mask) != 0;
    const int theirLo = upper ? lo - size : hi, theirHi = theirLo + size;
    exchange(ctx, tag, a, peer, piece, out + off(lo), off(hi) - off(lo), out + off(theirLo),
             off(theirHi) - off(theirLo), nullptr);
    lo = upper ? theirLo : lo;
    hi = upper ? hi : theirHi;
  }
  fold.foldOut(ctx, tag, a, out);
}

}  // namespace chorus::algo
