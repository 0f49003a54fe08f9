// Recursive-doubling allreduce for small messages: log2(n) exchanges of the whole buffer instead of the
// ring's 2(n-1) latency steps. Vocabulary: p = the largest power of two <= n; the first 2*(n-p) ranks pair up
// (even -> odd) so that p "active" ranks remain; active rank a exchanges with a XOR 2^k at step k.
// Both partners combine the same two partial results, and IEEE addition/multiplication are commutative, so
// every rank ends with bitwise the same values.
#include <cstring>

#include "algorithms/collective.h"
#include "algorithms/ring.h"
#include "lib/kernels/reduce.h"

namespace chorus::algo {

void recursiveDoublingAllReduce(Comm& comm, const OpTag& tag, const CollArgs& a) {
  const int n = comm.nranks(), r = comm.rank();
  const size_t es = kernels::dataTypeSize(a.dtype), bytes = a.count * es;
  auto out = static_cast<uint8_t*>(a.recvbuff);
  if (a.sendbuff != a.recvbuff) std::memmove(out, a.sendbuff, bytes);
  if (n == 1) return;
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const int extra = n - p;
  uint8_t* tmp = comm.scratch(bytes, 2);
  auto exchange = [&](int peer) {
    Request s, v;
    comm.irecv(peer, tmp, bytes, tag, &v);
    comm.isend(peer, out, bytes, tag, &s);
    comm.waitUntil([&] { return s.done && v.done; }, tag);
    kernels::reduce(out, out, tmp, a.count, a.dtype, a.op);
  };
  auto realRank = [&](int active) { return active < extra ? active * 2 + 1 : active + extra; };

  if (r < 2 * extra && r % 2 == 0) {  // folded into r+1: contribute, then wait for the result
    Request s, v;
    comm.isend(r + 1, out, bytes, tag, &s);
    comm.irecv(r + 1, out, bytes, tag, &v);
    comm.waitUntil([&] { return s.done && v.done; }, tag);
    return;
  }
  if (r < 2 * extra) {
    Request v;
    comm.irecv(r - 1, tmp, bytes, tag, &v);
    comm.wait(v, tag);
    kernels::reduce(out, out, tmp, a.count, a.dtype, a.op);
  }
  const int active = r < 2 * extra ? r / 2 : r - extra;
  for (int mask = 1; mask < p; mask <<= 1) exchange(realRank(active ^ mask));
  if (a.op == chorusAvg) kernels::scaleDivide(out, a.count, a.dtype, n);
  if (r < 2 * extra) {
    Request s;
    comm.isend(r - 1, out, bytes, tag, &s);
    comm.wait(s, tag);
  }
}

}  // namespace chorus::algo
