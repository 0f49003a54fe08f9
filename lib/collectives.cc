#include "lib/collectives.h"

#include <algorithm>
#include <cstring>
#include <deque>

#include "lib/error.h"
#include "lib/kernels/reduce.h"
#include "lib/log.h"

namespace chorus {

TaggedCall tagCall(Comm& comm, const algo::CollArgs& a) {
  TaggedCall t{a, {}};
  t.tag.kind = a.kind;
  t.tag.count = a.count;
  t.tag.dtype = static_cast<uint8_t>(a.dtype);
  t.tag.redop = static_cast<uint8_t>(a.op);
  t.tag.root = a.root;
  if (a.kind == OpKind::Send) {
    t.tag.seq = a.isRecv ? comm.nextRecvSeq(a.root) : comm.nextSendSeq(a.root);
    t.tag.root = -1;  // the peer differs between the two sides
    t.tag.redop = 0;
  } else {
    t.tag.seq = comm.nextCollSeq();
  }
  if (a.kind == OpKind::AllGather || a.kind == OpKind::AllToAll || a.kind == OpKind::Broadcast ||
      a.kind == OpKind::Barrier)
    t.tag.redop = 0;
  return t;
}

namespace {

// AUTO picks the allreduce by size and rank count; CHORUS_ALGO=RING forces the ring. Measured over TCP loopback
// with all_reduce_perf -z 1 (README.md, "Algorithm selection"):
//  * up to 256 KiB recursive doubling's log2(n) exchanges beat the ring's 2(n-1) steps although each exchange
//    carries the whole buffer: 67/225/323/1078 us against 74/385/612/1809 us at 256 KiB for 2/3/4/8 ranks;
//  * from there to 2 MiB, with 4 or more ranks, halving-doubling moves the ring's bytes in 2*log2(p) steps:
//    1.1 ms against 2.0 ms at 1 MiB for 4 ranks, 2.2 against 6.1 ms for 8; at 2 ranks the two tie, at 4 MiB and
//    above the pipelined ring wins.
// When every peer is over shared memory, up to 4 KiB the direct exchange (every rank sends to every rank, one
// round) wins because each operation needs every rank scheduled only once: 4 ranks on 2 cores 14.1-14.7 against
// 17.6-17.8 us at 8 B, 15.5 against 18.5 at 4 KiB; 8 ranks 46-70 against 75-98 us at 8 B; at 32 KiB it loses
// (29 against 22 us). Over TCP it loses at every size (4 ranks, 8 B: 150 against 78 us): n-1 sends cost
// n-1 system calls.
enum class AllReduceAlgo { Direct, RecursiveDoubling, HalvingDoubling, Ring };
constexpr size_t kDirectMaxBytes = 4 * 1024;
constexpr size_t kRecursiveDoublingMaxBytes = 256 * 1024;
constexpr size_t kHalvingDoublingMaxBytes = 2 * 1024 * 1024;

AllReduceAlgo chooseAllReduce(const Comm& comm, const algo::CollArgs& a) {
  if (comm.config().algo == Algo::Ring) return AllReduceAlgo::Ring;
  size_t bytes = a.count * kernels::dataTypeSize(a.dtype);
  if (bytes <= kDirectMaxBytes && comm.nranks() > 2 && comm.allPeersOverShm()) return AllReduceAlgo::Direct;
  if (bytes <= kRecursiveDoublingMaxBytes) return AllReduceAlgo::RecursiveDoubling;
  if (comm.nranks() >= 4 && bytes <= kHalvingDoublingMaxBytes) return AllReduceAlgo::HalvingDoubling;
  return AllReduceAlgo::Ring;
}

void runOne(Comm& comm, const TaggedCall& c) {
  const algo::CollArgs& a = c.args;
  CHORUS_DEBUG(kColl, "{} {} sendbuff {} recvbuff {}", comm.name(), transport::describe(c.tag), a.sendbuff,
               a.recvbuff);
  switch (a.kind) {
    case OpKind::AllReduce:
      switch (chooseAllReduce(comm, a)) {
        case AllReduceAlgo::Direct: return algo::directAllReduce(comm, c.tag, a);
        case AllReduceAlgo::RecursiveDoubling: return algo::recursiveDoublingAllReduce(comm, c.tag, a);
        case AllReduceAlgo::HalvingDoubling: return algo::halvingDoublingAllReduce(comm, c.tag, a);
        case AllReduceAlgo::Ring: break;
      }
      return algo::ringAllReduce(comm, c.tag, a);
    case OpKind::ReduceScatter: return algo::ringReduceScatter(comm, c.tag, a);
    case OpKind::AllGather: return algo::ringAllGather(comm, c.tag, a);
    case OpKind::Broadcast: return algo::chainBroadcast(comm, c.tag, a);
    case OpKind::Reduce: return algo::chainReduce(comm, c.tag, a);
    case OpKind::AllToAll: return algo::directAllToAll(comm, c.tag, a);
    case OpKind::Barrier: return algo::disseminationBarrier(comm, c.tag);
    case OpKind::Send:
    case OpKind::None: break;
  }
}

// A group's Sends to self and Recvs from self pair up in order and become copies.
void copySelfMessages(Comm& comm, std::span<const TaggedCall> calls) {
  std::vector<const algo::CollArgs*> sends, recvs;
  for (const TaggedCall& c : calls)
    if (c.args.kind == OpKind::Send && c.args.root == comm.rank()) (c.args.isRecv ? recvs : sends).push_back(&c.args);
  if (sends.size() != recvs.size())
    fail(chorusInvalidUsage, "{}: this group has {} Send(s) to self but {} Recv(s) from self; they must pair up",
         comm.name(), sends.size(), recvs.size());
  for (size_t i = 0; i < sends.size(); ++i) {
    const algo::CollArgs &s = *sends[i], &r = *recvs[i];
    if (s.count != r.count || s.dtype != r.dtype)
      fail(chorusInvalidUsage, "{}: Send #{} to self has count {} ({}) but its Recv from self has count {} ({})",
           comm.name(), i, s.count, kernels::dataTypeName(s.dtype), r.count, kernels::dataTypeName(r.dtype));
    if (s.count > 0) std::memmove(r.recvbuff, s.sendbuff, s.count * kernels::dataTypeSize(s.dtype));
  }
}

}  // namespace

void runCalls(Comm& comm, std::span<const TaggedCall> calls) {
  copySelfMessages(comm, calls);
  auto remote = [&](const TaggedCall& c) { return c.args.kind == OpKind::Send && c.args.root != comm.rank(); };
  std::vector<Request> p2p;  // reserved up front: posted requests must not move
  p2p.reserve(static_cast<size_t>(std::count_if(calls.begin(), calls.end(), remote)));
  for (const TaggedCall& c : calls) {
    if (c.args.kind == OpKind::Send && c.args.root == comm.rank()) continue;
    // Nothing to move; the call still took its sequence number, so a rank that disagrees about the count
    // meets a mismatch at its next message.
    if (c.args.count == 0 && c.args.kind != OpKind::Barrier) continue;
    if (c.args.kind == OpKind::Send) {
      p2p.emplace_back();
      algo::postPointToPoint(comm, c.tag, c.args, &p2p.back());
    } else {
      runOne(comm, c);
    }
  }
  if (p2p.empty()) return;
  OpTag waitTag = calls.back().tag;
  comm.waitUntil([&] { return std::all_of(p2p.begin(), p2p.end(), [](const Request& r) { return r.done; }); },
                 waitTag);
}

}  // namespace chorus
