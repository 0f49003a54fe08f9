// Operations where every rank talks to its peers directly: AllReduce of tiny messages, AllToAll(v), Gather and
// Scatter (the root and each other rank), Send/Recv and the barrier.
#include <algorithm>
#include <vector>

#include "algorithms/collective.h"
#include "algorithms/ring.h"
#include "lib/kernels/reduce.h"

namespace chorus::algo {

namespace {

void waitAll(Context& ctx, const OpTag& tag, const std::vector<Request>& reqs) {
  ctx.waitUntil([&] { return std::all_of(reqs.begin(), reqs.end(), [](const Request& q) { return q.done; }); },
                tag);
}

// Sends sendBytes(to) bytes at sendAt(to) to every other rank and receives recvBytes(from) bytes from each into
// recvAt(from), all at once, then waits. Staggered peer order: at round i every rank sends to rank+i, so no single
// rank is everyone's target.
template <typename SendAt, typename RecvAt, typename SendBytes, typename RecvBytes>
void exchangeWithEveryPeer(Context& ctx, const OpTag& tag, SendBytes sendBytes, RecvBytes recvBytes, SendAt sendAt,
                           RecvAt recvAt) {
  const int n = ctx.nranks(), r = ctx.rank();
  std::vector<Request> reqs(2 * static_cast<size_t>(n - 1));
  for (int i = 1; i < n; ++i) {
    int to = mod(r + i, n), from = mod(r - i, n);
    ctx.irecv(from, recvAt(from), recvBytes(from), tag, &reqs[2 * (i - 1)]);
    ctx.isend(to, sendAt(to), sendBytes(to), tag, &reqs[2 * (i - 1) + 1]);
  }
  waitAll(ctx, tag, reqs);
}

// The root posts one message per other rank at once (block p of its buffer with rank p, staggered from root+1 as
// exchangeWithEveryPeer staggers), then does its own block; every other rank posts its one message to the root.
// toRoot: the other ranks send (Gather), else they receive (Scatter).
void rootWithEveryPeer(Context& ctx, const OpTag& tag, const CollArgs& a, bool toRoot) {
  const int n = ctx.nranks(), r = ctx.rank();
  const size_t block = a.count * kernels::dataTypeSize(a.dtype);
  if (r != a.root) {
    Request q;
    if (toRoot) ctx.isend(a.root, a.sendbuff, block, tag, &q);
    else ctx.irecv(a.root, a.recvbuff, block, tag, &q);
    return ctx.wait(q, tag);
  }
  std::vector<Request> reqs(static_cast<size_t>(n - 1));
  for (int i = 1; i < n; ++i) {
    const int p = mod(r + i, n);
    const size_t at = static_cast<size_t>(p) * block;
    if (toRoot) ctx.irecv(p, static_cast<uint8_t*>(a.recvbuff) + at, block, tag, &reqs[i - 1]);
    else ctx.isend(p, static_cast<const uint8_t*>(a.sendbuff) + at, block, tag, &reqs[i - 1]);
  }
  const size_t mine = static_cast<size_t>(r) * block;
  if (toRoot) a.space.copy(static_cast<uint8_t*>(a.recvbuff) + mine, a.sendbuff, block);
  else a.space.copy(a.recvbuff, static_cast<const uint8_t*>(a.sendbuff) + mine, block);
  waitAll(ctx, tag, reqs);
}

}  // namespace

void directAllToAll(Context& ctx, const OpTag& tag, const CollArgs& a) {
  const int r = ctx.rank();
  const size_t block = a.count * kernels::dataTypeSize(a.dtype);
  auto in = static_cast<const uint8_t*>(a.sendbuff);
  auto out = static_cast<uint8_t*>(a.recvbuff);
  a.space.copy(out + static_cast<size_t>(r) * block, in + static_cast<size_t>(r) * block, block);
  auto same = [&](int) { return block; };
  exchangeWithEveryPeer(
      ctx, tag, same, same, [&](int to) { return in + static_cast<size_t>(to) * block; },
      [&](int from) { return out + static_cast<size_t>(from) * block; });
}

// Each pair's blocks have the sizes the caller gave; a block of 0 elements still goes as an empty message, so a
// peer that expected another size gets the mismatch (Note [Message tags]), not a hang.
void directAllToAllv(Context& ctx, const OpTag& tag, const CollArgs& a) {
  const size_t n = static_cast<size_t>(ctx.nranks()), r = static_cast<size_t>(ctx.rank());
  const size_t es = kernels::dataTypeSize(a.dtype);
  const size_t* sendCounts = a.layout.data();
  const size_t *sendDispls = sendCounts + n, *recvCounts = sendCounts + 2 * n, *recvDispls = sendCounts + 3 * n;
  auto in = static_cast<const uint8_t*>(a.sendbuff);
  auto out = static_cast<uint8_t*>(a.recvbuff);
  if (recvCounts[r] > 0) a.space.copy(out + recvDispls[r] * es, in + sendDispls[r] * es, recvCounts[r] * es);
  exchangeWithEveryPeer(
      ctx, tag, [&](int to) { return sendCounts[to] * es; }, [&](int from) { return recvCounts[from] * es; },
      [&](int to) { return sendCounts[to] > 0 ? in + sendDispls[to] * es : in; },  // NULL with nothing to send
      [&](int from) { return recvCounts[from] > 0 ? out + recvDispls[from] * es : out; });
}

// Every rank sends its input to every other rank and reduces the n contributions itself, in rank order, so
// every rank computes bitwise the same result. One round instead of log2(n): when ranks outnumber cores, an
// operation then needs each rank to be scheduled once rather than once per round.
void directAllReduce(Context& ctx, const OpTag& tag, const CollArgs& a) {
  const int n = ctx.nranks(), r = ctx.rank();
  const size_t es = kernels::dataTypeSize(a.dtype), bytes = a.count * es;
  auto out = static_cast<uint8_t*>(a.recvbuff);
  if (n == 1) return a.space.copy(out, a.sendbuff, bytes);
  uint8_t* all = ctx.scratch(a.space, bytes * static_cast<size_t>(n), 2);  // contribution of rank q at q * bytes
  a.space.copy(all + static_cast<size_t>(r) * bytes, a.sendbuff, bytes);
  auto same = [&](int) { return bytes; };
  exchangeWithEveryPeer(
      ctx, tag, same, same, [&](int) { return all + static_cast<size_t>(r) * bytes; },
      [&](int from) { return all + static_cast<size_t>(from) * bytes; });
  const void* few[16];
  std::vector<const void*> many;
  const void** srcs = n <= 16 ? few : (many.resize(static_cast<size_t>(n)), many.data());
  for (int q = 0; q < n; ++q) srcs[q] = all + static_cast<size_t>(q) * bytes;
  a.space.reduceN(out, srcs, n, a.count, a.dtype, a.op);
  if (a.op == chorusAvg) a.space.scaleDivide(out, a.count, a.dtype, n);
}

void directGather(Context& ctx, const OpTag& tag, const CollArgs& a) { rootWithEveryPeer(ctx, tag, a, true); }

void directScatter(Context& ctx, const OpTag& tag, const CollArgs& a) { rootWithEveryPeer(ctx, tag, a, false); }

void disseminationBarrier(Context& ctx, const OpTag& tag) {
  const int n = ctx.nranks(), r = ctx.rank();
  for (int d = 1; d < n; d *= 2) {
    Request s, v;
    ctx.irecv(mod(r - d, n), nullptr, 0, tag, &v);
    ctx.isend(mod(r + d, n), nullptr, 0, tag, &s);
    ctx.waitUntil([&] { return s.done && v.done; }, tag);
  }
}

void postPointToPoint(Context& ctx, const OpTag& tag, const CollArgs& a, Request* req) {
  const size_t bytes = a.count * kernels::dataTypeSize(a.dtype);
  if (a.isRecv)
    ctx.irecv(a.root, a.recvbuff, bytes, tag, req);
  else
    ctx.isend(a.root, a.sendbuff, bytes, tag, req);
}

}  // namespace chorus::algo
