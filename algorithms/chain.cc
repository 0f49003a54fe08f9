// Pipelined chains for rooted collectives. Ranks form the ring order starting at the root:
// position p = (rank - root) mod n. Broadcast flows root -> p1 -> ... -> p(n-1); Reduce flows the other way,
// p(n-1) -> ... -> root. The buffer is cut into chunks of CHORUS_CHUNK_BYTES so that every link is busy at
// once; a chain (not a cycle) cannot deadlock even when a rank holds a staging slot until its send is done.
#include <algorithm>
#include <vector>

#include "algorithms/collective.h"
#include "algorithms/ring.h"
#include "lib/kernels/reduce.h"

namespace chorus::algo {

namespace {
constexpr int kSlots = 4;

size_t chunkCount(const Context& ctx, size_t bytes, size_t es) {
  size_t chunkElems = std::max<size_t>(1, ctx.chunkBytes(bytes) / es);
  size_t elems = bytes / es;
  return std::max<size_t>(1, (elems + chunkElems - 1) / chunkElems);
}

bool allDone(const std::vector<Request>& v) {
  return std::all_of(v.begin(), v.end(), [](const Request& q) { return q.done; });
}
}  // namespace

void chainBroadcast(Context& ctx, const OpTag& tag, const CollArgs& a) {
  const int n = ctx.nranks(), r = ctx.rank();
  const size_t es = kernels::dataTypeSize(a.dtype), bytes = a.count * es;
  auto out = static_cast<uint8_t*>(a.recvbuff);
  const int pos = mod(r - a.root, n);
  if (pos == 0) a.space.copy(out, a.sendbuff, bytes);
  if (n == 1) return;
  const size_t C = chunkCount(ctx, bytes, es), elems = a.count;
  const int next = mod(r + 1, n), prev = mod(r - 1, n);
  const bool forwards = pos < n - 1;
  // The root sends from its input so its copy into recvbuff above overlaps nothing on the wire.
  const uint8_t* src = pos == 0 ? static_cast<const uint8_t*>(a.sendbuff) : out;
  std::vector<Request> sends(forwards ? C : 0), recvs(pos > 0 ? C : 0);
  for (size_t c = 0; c < recvs.size(); ++c) {
    size_t b = chunkBegin(elems, C, c) * es, e = chunkBegin(elems, C, c + 1) * es;
    ctx.irecv(prev, out + b, e - b, tag, &recvs[c]);
  }
  for (size_t c = 0; c < sends.size(); ++c) {
    if (pos > 0) ctx.wait(recvs[c], tag);
    size_t b = chunkBegin(elems, C, c) * es, e = chunkBegin(elems, C, c + 1) * es;
    ctx.isend(next, src + b, e - b, tag, &sends[c]);
  }
  ctx.waitUntil([&] { return allDone(sends) && allDone(recvs); }, tag);
}

void chainReduce(Context& ctx, const OpTag& tag, const CollArgs& a) {
  const int n = ctx.nranks(), r = ctx.rank();
  const size_t es = kernels::dataTypeSize(a.dtype), bytes = a.count * es;
  auto in = static_cast<const uint8_t*>(a.sendbuff);
  auto out = static_cast<uint8_t*>(a.recvbuff);
  const int pos = mod(r - a.root, n);
  if (n == 1) return a.space.copy(out, in, bytes);
  const size_t C = chunkCount(ctx, bytes, es), elems = a.count;
  const size_t slotBytes = ((elems + C - 1) / C) * es;
  const int toward = mod(r - 1, n), from = mod(r + 1, n);
  const bool tail = pos == n - 1, root = pos == 0;
  auto range = [&](size_t c, size_t* b, size_t* len) {
    *b = chunkBegin(elems, C, c) * es;
    *len = chunkBegin(elems, C, c + 1) * es - *b;
  };
  if (tail) {  // the far end just streams its input
    std::vector<Request> sends(C);
    for (size_t c = 0; c < C; ++c) {
      size_t b, len;
      range(c, &b, &len);
      ctx.isend(toward, in + b, len, tag, &sends[c]);
    }
    ctx.waitUntil([&] { return allDone(sends); }, tag);
    return;
  }
  // Receive into a slot, reduce with our input, then forward the slot (middle) or land in recvbuff (root).
  uint8_t* slots = ctx.scratch(a.space, slotBytes * kSlots, 0);
  std::vector<Request> recvs(C), sends(root ? 0 : C);
  std::vector<int> slotOf(C, -1), freeSlots;
  for (int i = kSlots - 1; i >= 0; --i) freeSlots.push_back(i);
  size_t posted = 0, processed = 0, sendsChecked = 0;
  while (processed < C) {
    // Middle ranks get a slot back once the send that read it has left.
    while (!root && sendsChecked < processed && sends[sendsChecked].done) freeSlots.push_back(slotOf[sendsChecked++]);
    while (posted < C && !freeSlots.empty()) {
      slotOf[posted] = freeSlots.back();
      freeSlots.pop_back();
      size_t b, len;
      range(posted, &b, &len);
      ctx.irecv(from, slots + static_cast<size_t>(slotOf[posted]) * slotBytes, len, tag, &recvs[posted]);
      ++posted;
    }
    if (processed < posted && recvs[processed].done) {
      size_t b, len;
      range(processed, &b, &len);
      uint8_t* slot = slots + static_cast<size_t>(slotOf[processed]) * slotBytes;
      if (root) {
        a.space.reduce(out + b, in + b, slot, len / es, a.dtype, a.op);
        if (a.op == chorusAvg) a.space.scaleDivide(out + b, len / es, a.dtype, n);
        freeSlots.push_back(slotOf[processed]);
      } else {
        a.space.reduce(slot, in + b, slot, len / es, a.dtype, a.op);
        ctx.isend(toward, slot, len, tag, &sends[processed]);
      }
      ++processed;
      continue;
    }
    if (processed < posted)
      ctx.waitUntil([&] { return recvs[processed].done; }, tag);
    else
      ctx.waitUntil([&] { return sends[sendsChecked].done; }, tag);
  }
  ctx.waitUntil([&] { return allDone(sends); }, tag);
}

}  // namespace chorus::algo
