// Note [Double binary tree]
// The buffer is cut in two halves; tree t (0, 1) of algorithms/tree_shape.h (hostTree: a double binary tree
// over hosts, a chain inside each host) reduces half t toward its root and broadcasts the result back. Each
// half is cut into chunks of at most CHORUS_CHUNK_BYTES; chunk c of tree t is message (c, t). Up messages go
// child -> parent carrying partial sums, down messages parent -> child carrying the result (chunks are smaller
// for mid-sized messages, treeChunkBytes, so those pipeline along the depth too), and every chunk
// moves independently, so up and down phases of different chunks, and both trees, run at the same time. A rank
// that is a leaf in one tree is (nearly always) interior in the other, so every rank sends and receives about
// twice the buffer, like the ring, in O(log hosts + ranks per host) steps instead of 2(n-1).
//
// Message order between two ranks (they arrive in posting order, Note [Message tags]): all up messages in
// (c, t) order, then all down messages in (c, t) order. A pair can carry both kinds: in the two trees one
// rank may be the other's child and its parent. Ups first is deadlock-free: an up message depends only on up
// messages of the same chunk from further down its tree, never on a down message, so every up completes; then
// every down depends only on ups and on downs from further up. It costs no bandwidth: a rank's link carries the
// same bytes in either order, and on a pair that only carries one kind nothing waits at all.
// Receives of up messages need a staging slot (a reduction reads it), granted in global (c, t, child) order so
// that the slots always hold the oldest chunks, whose senders never wait for us: at most kSlots chunks of ups
// in flight per rank. The first child's up message is reduced while it arrives where the transport can
// (Transport::irecvReduce); the others are staged and reduced once all have arrived. Down messages land in the
// output directly, which is safe: a down chunk can only arrive after the parent received our up chunk, i.e.
// after we stopped reading that part of the output.
#include <algorithm>
#include <vector>

#include "algorithms/collective.h"
#include "algorithms/ring.h"
#include "algorithms/tree_shape.h"
#include "lib/kernels/reduce.h"

namespace chorus::algo {

namespace {

constexpr int kSlots = 8;  // staging chunks in flight per rank; at least the 3 children a rank can have

struct UpRecv {  // up message (c, t) from children[t][child]
  int t;
  size_t c;
  int child;
  int slot = -1;
  bool fused = false;
  Request req;
};

struct Send {
  int peer;
  const uint8_t* buf;
  size_t len;
  int t;
  size_t c;
  bool up;
  Request req;
};

}  // namespace

void treeAllReduce(Comm& comm, const OpTag& tag, const CollArgs& a) {
  const int n = comm.nranks(), r = comm.rank();
  if (n == 1) return ringAllReduce(comm, tag, a);  // nothing to exchange: the ring's copy
  const size_t es = kernels::dataTypeSize(a.dtype);
  auto in = static_cast<const uint8_t*>(a.sendbuff);
  auto out = static_cast<uint8_t*>(a.recvbuff);
  // The two halves: tree t owns elements [lo[t], lo[t] + len[t]), cut into C[t] chunks.
  TreeLinks links[2] = {hostTree(comm.hostOf(), r, 0), hostTree(comm.hostOf(), r, 1)};
  const size_t lo[2] = {0, (a.count + 1) / 2};
  const size_t len[2] = {(a.count + 1) / 2, a.count / 2};
  const size_t chunkElems = std::max<size_t>(1, treeChunkBytes(a.count * es, comm.config().chunkBytes) / es);
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
  uint8_t* slots = comm.scratch(slotBytes * kSlots, 0);

  // Every message this rank receives and sends, in the orders Note [Double binary tree] fixes.
  std::vector<UpRecv> ups;
  std::vector<std::pair<int, size_t>> downs;  // (t, c) from links[t].parent
  std::vector<Send> sends;
  for (size_t c = 0; c < maxC; ++c)
    for (int t = 0; t < 2; ++t) {
      if (c >= C[t]) continue;
      for (int k = 0; k < static_cast<int>(links[t].children.size()); ++k) ups.push_back({t, c, k, -1, false, {}});
      if (links[t].parent >= 0) downs.emplace_back(t, c);
    }
  // Per tree and chunk: children's up messages still to reduce, and whether the result is here.
  std::vector<int> upsLeft[2];
  std::vector<char> resultHere[2];
  for (int t = 0; t < 2; ++t) {
    upsLeft[t].assign(C[t], static_cast<int>(links[t].children.size()));
    resultHere[t].assign(C[t], 0);
  }
  // Sends: the up send of (c, t) reads our partial sum (or, at a leaf, the input); down sends read the output.
  for (size_t c = 0; c < maxC; ++c)
    for (int t = 0; t < 2; ++t)
      if (c < C[t] && links[t].parent >= 0) {
        size_t off, bytes;
        range(t, c, &off, &bytes);
        const uint8_t* src = links[t].children.empty() ? in + off : out + off;
        sends.push_back({links[t].parent, src, bytes, t, c, true, {}});
      }
  for (size_t c = 0; c < maxC; ++c)
    for (int t = 0; t < 2; ++t)
      if (c < C[t])
        for (int child : links[t].children) {
          size_t off, bytes;
          range(t, c, &off, &bytes);
          sends.push_back({child, out + off, bytes, t, c, false, {}});
        }
  // Stable by peer keeps every peer's sends in (ups, downs) x (c, t) order.
  std::stable_sort(sends.begin(), sends.end(), [](const Send& x, const Send& y) { return x.peer < y.peer; });

  std::vector<int> freeSlots;
  for (int i = kSlots - 1; i >= 0; --i) freeSlots.push_back(i);
  std::vector<Request> downReq(downs.size());
  size_t upPosted = 0, downPosted = 0, downDone = 0, sendsDone = 0;
  std::vector<size_t> upOpen;  // posted ups not yet reduced (at most kSlots)

  // At a root (which has children, n > 1) the sum of chunk (c, t) is the result; a leaf's partial sum is its
  // input, ready from the start (upsLeft 0).
  auto finishUp = [&](int t, size_t c) {
    if (links[t].parent >= 0) return;
    size_t off, bytes;
    range(t, c, &off, &bytes);
    if (a.op == chorusAvg) kernels::scaleDivide(out + off, bytes / es, a.dtype, n);
    resultHere[t][c] = 1;
  };
  std::vector<size_t> upsEndFrom(static_cast<size_t>(n), 0);  // per peer: 1 + index of its last up message
  for (size_t i = 0; i < ups.size(); ++i)
    upsEndFrom[static_cast<size_t>(links[ups[i].t].children[static_cast<size_t>(ups[i].child)])] = i + 1;

  auto postRecvs = [&] {
    while (upPosted < ups.size() && !freeSlots.empty()) {
      UpRecv& u = ups[upPosted];
      size_t off, bytes;
      range(u.t, u.c, &off, &bytes);
      int peer = links[u.t].children[static_cast<size_t>(u.child)];
      u.slot = freeSlots.back();
      freeSlots.pop_back();
      u.fused = u.child == 0 && comm.irecvReduce(peer, out + off, in + off, bytes, a.dtype, a.op, tag, &u.req);
      if (!u.fused) comm.irecv(peer, slots + static_cast<size_t>(u.slot) * slotBytes, bytes, tag, &u.req);
      upOpen.push_back(upPosted++);
    }
    // Downs from a parent follow every up from that same rank (it may be our child in the other tree).
    while (downPosted < downs.size()) {
      auto [t, c] = downs[downPosted];
      if (upPosted < upsEndFrom[static_cast<size_t>(links[t].parent)]) break;
      size_t off, bytes;
      range(t, c, &off, &bytes);
      comm.irecv(links[t].parent, out + off, bytes, tag, &downReq[downPosted]);
      ++downPosted;
    }
  };
  auto reduceArrived = [&] {
    bool any = false;
    for (size_t k = 0; k < upOpen.size();) {
      UpRecv& u = ups[upOpen[k]];
      if (!u.req.done) {
        ++k;
        continue;
      }
      any = true;
      upOpen.erase(upOpen.begin() + static_cast<long>(k));
      if (--upsLeft[u.t][u.c] > 0) continue;
      // Every child's chunk (c, t) is here: reduce them in child order into the output.
      size_t off, bytes;
      range(u.t, u.c, &off, &bytes);
      size_t first = static_cast<size_t>(&u - ups.data()) - static_cast<size_t>(u.child);
      for (size_t k2 = 0; k2 < links[u.t].children.size(); ++k2) {
        UpRecv& v = ups[first + k2];
        if (!v.fused) {
          const uint8_t* acc = k2 == 0 ? in + off : out + off;
          kernels::reduce(out + off, acc, slots + static_cast<size_t>(v.slot) * slotBytes, bytes / es, a.dtype, a.op);
        }
        freeSlots.push_back(v.slot);
      }
      finishUp(u.t, u.c);
    }
    while (downDone < downPosted && downReq[downDone].done) {
      auto [t, c] = downs[downDone++];
      resultHere[t][c] = 1;
      any = true;
    }
    return any;
  };
  // Sends go out per peer in list order, each once its data is ready.
  std::vector<size_t> nextSend;  // per distinct peer: index into sends
  for (size_t i = 0; i < sends.size(); ++i)
    if (i == 0 || sends[i].peer != sends[i - 1].peer) nextSend.push_back(i);
  std::vector<size_t> peerEnd;
  for (size_t k = 0; k < nextSend.size(); ++k) peerEnd.push_back(k + 1 < nextSend.size() ? nextSend[k + 1] : sends.size());
  auto postSends = [&] {
    for (size_t k = 0; k < nextSend.size(); ++k)
      while (nextSend[k] < peerEnd[k]) {
        Send& s = sends[nextSend[k]];
        bool ready = s.up ? upsLeft[s.t][s.c] == 0 : resultHere[s.t][s.c] != 0;
        if (!ready) break;
        comm.isend(s.peer, s.buf, s.len, tag, &s.req);
        ++nextSend[k];
      }
  };
  auto allSent = [&] {
    for (size_t k = 0; k < nextSend.size(); ++k)
      if (nextSend[k] < peerEnd[k]) return false;
    return true;
  };

  while (true) {
    reduceArrived();
    postRecvs();
    postSends();
    if (upPosted == ups.size() && upOpen.empty() && downDone == downs.size() && allSent()) break;
    comm.waitUntil(
        [&] {
          for (size_t i : upOpen)
            if (ups[i].req.done) return true;
          return downDone < downPosted && downReq[downDone].done;
        },
        tag);
  }
  comm.waitUntil(
      [&] {
        for (; sendsDone < sends.size(); ++sendsDone)
          if (!sends[sendsDone].req.done) return false;
        return true;
      },
      tag);
}

}  // namespace chorus::algo
