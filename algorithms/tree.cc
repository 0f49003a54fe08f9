// Note [Double binary tree]:
// The buffer is cut in two halves; tree t (0, 1) of algorithms/tree_shape.h (hostTree: a double binary tree
// over hosts, a chain inside each host) reduces half t toward its root and broadcasts the result back. Each
// half is cut into chunks of at most CHORUS_CHUNK_BYTES; chunk c of tree t is message (c, t). Up messages go
// child -> parent carrying partial sums, down messages parent -> child carrying the result (chunks are smaller
// for mid-sized messages, treeChunkBytes, so those pipeline along the depth too), and every chunk
// moves independently, so up and down phases of different chunks, and both trees, run at the same time. A rank
// that is a leaf in one tree is (nearly always) interior in the other, so every rank sends and receives about
// twice the buffer, like the ring, in O(log hosts + ranks per host) steps instead of 2(n-1).
//
// Message order between two ranks (they arrive in posting order, Note [Message tags]): all up messages, then all
// down messages, each kind by chunk, ups from deeper ranks first, then tree: the key
//     up (c, t) sent by a rank at depth d:     (0, c, -d, t)
//     down (c, t) to a rank at depth d:        (1, c,  d, t)
// A pair can carry both kinds: in the two trees one rank may be the other's child and its parent. The order is
// deadlock-free: a message depends only on messages with smaller keys (an up on the ups of the same chunk from
// one level further down, a down on the down one level up and, at the root, on the chunk's ups), so the
// message with the smallest key not yet delivered can always go. It costs no bandwidth: a rank's link carries
// the same bytes in either order. (Interleaving the kinds, downs of chunk c after ups of chunk c + L with L a
// round trip's worth of chunks, measured no faster: 8 hosts, 1 Gbit/s, 0.5 ms, 16 MiB in 333 against 316 ms.)
// Each receive is handled when it completes, whatever its peer: handling downs in one list across both trees
// held a finished down of one tree behind an unfinished one of the other (4 hosts, 1 Gbit/s, 0.5 ms: 16 MiB in
// 607 ms; handled as they complete 274 ms, at the bound of 2S on the busiest link).
// Receives of up messages need a staging slot (a reduction reads it), granted in key order so that the slots
// always hold the oldest chunks, whose senders never wait for us: at most kSlots chunks of ups in flight per
// rank. The first child's up message is reduced while it arrives where the transport can
// (Transport::irecvReduce); the others are staged and reduced once all have arrived. Down messages land in the
// output directly, which is safe: a down chunk can only arrive after the parent received our up chunk, i.e.
// after we stopped reading that part of the output.
#include <algorithm>
#include <tuple>
#include <vector>

#include "algorithms/collective.h"
#include "algorithms/ring.h"
#include "algorithms/tree_shape.h"
#include "lib/kernels/reduce.h"

namespace chorus::algo {

namespace {

constexpr int kSlots = 8;  // staging chunks in flight per rank; at least the children of a chunk in both trees

// A message's place in the order of Note [Double binary tree].
struct Key {
  int kind;  // 0 up, 1 down
  size_t c;
  int depth;
  int t;
  bool up() const { return kind == 0; }
  auto operator<=>(const Key&) const = default;
};

struct Recv {  // an up message (c, t) from children[t][child], or a down message (c, t) from the parent
  Key key;
  int peer;
  int child;
  int slot = -1;
  bool fused = false;
  Request req;
};

struct Send {
  Key key;
  int peer;
  const uint8_t* buf;
  size_t len;
  Request req;
};

// One peer's messages (receives or sends), as indices into their list, in that list's order.
struct PeerQueue {
  int peer;
  std::vector<size_t> items;
  size_t next = 0;
};

template <typename Message>
std::vector<PeerQueue> byPeer(const std::vector<Message>& messages) {
  std::vector<PeerQueue> queues;
  for (size_t i = 0; i < messages.size(); ++i) {
    auto q = std::find_if(queues.begin(), queues.end(), [&](const PeerQueue& x) { return x.peer == messages[i].peer; });
    if (q == queues.end()) q = queues.insert(queues.end(), PeerQueue{messages[i].peer, {}, 0});
    q->items.push_back(i);
  }
  return queues;
}

}  // namespace

void treeAllReduce(Context& ctx, const OpTag& tag, const CollArgs& a) {
  const int n = ctx.nranks(), r = ctx.rank();
  if (n == 1) return ringAllReduce(ctx, tag, a);  // nothing to exchange: the ring's copy
  const size_t es = kernels::dataTypeSize(a.dtype);
  auto in = static_cast<const uint8_t*>(a.sendbuff);
  auto out = static_cast<uint8_t*>(a.recvbuff);
  // The two halves: tree t owns elements [lo[t], lo[t] + len[t]), cut into C[t] chunks.
  TreeLinks links[2] = {hostTree(ctx.hostOf(), r, 0), hostTree(ctx.hostOf(), r, 1)};
  const size_t lo[2] = {0, (a.count + 1) / 2};
  const size_t len[2] = {(a.count + 1) / 2, a.count / 2};
  const size_t chunkElems = std::max<size_t>(1, treeChunkBytes(a.count * es, ctx.chunkBytes(a.count * es)) / es);
  size_t C[2];
  for (int t = 0; t < 2; ++t) C[t] = (len[t] + chunkElems - 1) / chunkElems;
  const size_t maxC = std::max(C[0], C[1]);
  auto range = [&](int t, size_t c, size_t* off, size_t* bytes) {
    size_t b = chunkBegin(len[t], C[t], c), e = chunkBegin(len[t], C[t], c + 1);
    *off = (lo[t] + b) * es;
    *bytes = (e - b) * es;
  };
  size_t slotBytes = 0;
  for (int t = 0; t < 2; ++t)
    if (C[t] > 0) slotBytes = std::max(slotBytes, ((len[t] + C[t] - 1) / C[t]) * es);
  uint8_t* slots = ctx.scratch(a.space, slotBytes * kSlots, 0);

  const int depth[2] = {hostTreeDepth(ctx.hostOf(), r, 0), hostTreeDepth(ctx.hostOf(), r, 1)};
  auto upKey = [](size_t c, int t, int d) { return Key{0, c, -d, t}; };
  auto downKey = [](size_t c, int t, int d) { return Key{1, c, d, t}; };

  // Every message this rank receives and sends. Receives in key order, siblings (same key) in child order; a
  // leaf's up send reads the input, an interior rank's its partial sum, a down send the output.
  std::vector<Recv> recvs;
  std::vector<Send> sends;
  for (size_t c = 0; c < maxC; ++c)
    for (int t = 0; t < 2; ++t) {
      if (c >= C[t]) continue;
      size_t off, bytes;
      range(t, c, &off, &bytes);
      const std::vector<int>& kids = links[t].children;
      for (int k = 0; k < static_cast<int>(kids.size()); ++k) {
        recvs.push_back({upKey(c, t, depth[t] + 1), kids[static_cast<size_t>(k)], k, -1, false, {}});
        sends.push_back({downKey(c, t, depth[t] + 1), kids[static_cast<size_t>(k)], out + off, bytes, {}});
      }
      if (links[t].parent >= 0) {
        recvs.push_back({downKey(c, t, depth[t]), links[t].parent, -1, -1, false, {}});
        sends.push_back({upKey(c, t, depth[t]), links[t].parent, kids.empty() ? in + off : out + off, bytes, {}});
      }
    }
  std::sort(recvs.begin(), recvs.end(),
            [](const Recv& x, const Recv& y) { return std::tie(x.key, x.child) < std::tie(y.key, y.child); });
  std::sort(sends.begin(), sends.end(), [](const Send& x, const Send& y) { return x.key < y.key; });

  // Per tree and chunk: children's up messages still to reduce, and whether the result is here.
  std::vector<int> upsLeft[2];
  std::vector<char> resultHere[2];
  for (int t = 0; t < 2; ++t) {
    upsLeft[t].assign(C[t], static_cast<int>(links[t].children.size()));
    resultHere[t].assign(C[t], 0);
  }
  // At a root (which has children, n > 1) the sum of chunk (c, t) is the result; a leaf's partial sum is its
  // input, ready from the start (upsLeft 0).
  auto finishUp = [&](int t, size_t c) {
    if (links[t].parent >= 0) return;
    size_t off, bytes;
    range(t, c, &off, &bytes);
    if (a.op == chorusAvg) a.space.scaleDivide(out + off, bytes / es, a.dtype, n);
    resultHere[t][c] = 1;
  };

  // Receives are posted per peer in key order; ups also take staging slots in key order (upOrder).
  std::vector<PeerQueue> recvQueues = byPeer(recvs);
  std::vector<size_t> upOrder;
  for (size_t i = 0; i < recvs.size(); ++i)
    if (recvs[i].key.up()) upOrder.push_back(i);
  std::vector<int> freeSlots;
  for (int i = kSlots - 1; i >= 0; --i) freeSlots.push_back(i);
  size_t upGranted = 0, handled = 0;
  std::vector<size_t> open;  // posted receives not yet handled

  auto postRecvs = [&] {
    for (bool moved = true; moved;) {
      moved = false;
      for (PeerQueue& q : recvQueues)
        while (q.next < q.items.size()) {
          const size_t i = q.items[q.next];
          Recv& m = recvs[i];
          if (m.key.up() && (upOrder[upGranted] != i || freeSlots.empty())) break;
          size_t off, bytes;
          range(m.key.t, m.key.c, &off, &bytes);
          if (m.key.up()) {
            ++upGranted;
            m.slot = freeSlots.back();
            freeSlots.pop_back();
            m.fused = m.child == 0 &&
                      ctx.irecvReduce(a.space, m.peer, out + off, in + off, bytes, a.dtype, a.op, tag, &m.req);
            if (!m.fused) ctx.irecv(m.peer, slots + static_cast<size_t>(m.slot) * slotBytes, bytes, tag, &m.req);
          } else {
            ctx.irecv(m.peer, out + off, bytes, tag, &m.req);
          }
          open.push_back(i);
          ++q.next;
          moved = true;
        }
    }
  };
  auto handleArrived = [&] {
    for (size_t k = 0; k < open.size();) {
      Recv& m = recvs[open[k]];
      if (!m.req.done) {
        ++k;
        continue;
      }
      open.erase(open.begin() + static_cast<long>(k));
      ++handled;
      const int t = m.key.t;
      const size_t c = m.key.c;
      if (!m.key.up()) {
        resultHere[t][c] = 1;
        continue;
      }
      if (--upsLeft[t][c] > 0) continue;
      // Every child's chunk (c, t) is here: reduce them in child order into the output.
      size_t off, bytes;
      range(t, c, &off, &bytes);
      const size_t first = static_cast<size_t>(&m - recvs.data()) - static_cast<size_t>(m.child);
      for (size_t k2 = 0; k2 < links[t].children.size(); ++k2) {
        Recv& v = recvs[first + k2];
        if (!v.fused) {
          const uint8_t* acc = k2 == 0 ? in + off : out + off;
          a.space.reduce(out + off, acc, slots + static_cast<size_t>(v.slot) * slotBytes, bytes / es, a.dtype, a.op);
        }
        freeSlots.push_back(v.slot);
      }
      finishUp(t, c);
    }
  };
  // Sends go out per peer in key order, each once its data is ready.
  std::vector<PeerQueue> sendQueues = byPeer(sends);
  auto postSends = [&] {
    for (PeerQueue& q : sendQueues)
      for (; q.next < q.items.size(); ++q.next) {
        Send& s = sends[q.items[q.next]];
        const Key& k = s.key;
        if (k.up() ? upsLeft[k.t][k.c] != 0 : resultHere[k.t][k.c] == 0) break;
        ctx.isend(s.peer, s.buf, s.len, tag, &s.req);
      }
  };
  auto allSent = [&] {
    for (const PeerQueue& q : sendQueues)
      if (q.next < q.items.size()) return false;
    return true;
  };

  while (true) {
    handleArrived();
    postRecvs();
    postSends();
    if (handled == recvs.size() && allSent()) break;
    ctx.waitUntil(
        [&] {
          for (size_t i : open)
            if (recvs[i].req.done) return true;
          return false;
        },
        tag);
  }
  size_t sendsDone = 0;
  ctx.waitUntil(
      [&] {
        for (; sendsDone < sends.size(); ++sendsDone)
          if (!sends[sendsDone].req.done) return false;
        return true;
      },
      tag);
}

}  // namespace chorus::algo
