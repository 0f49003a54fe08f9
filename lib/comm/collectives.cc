#include "lib/comm/collectives.h"

#include <algorithm>
#include <deque>
#include <exception>

#include "lib/base/error.h"
#include "lib/kernels/reduce.h"
#include "lib/base/log.h"

namespace chorus {

TaggedCall tagCall(Comm& comm, const CollArgs& a) {
  TaggedCall t{a, {}};
  t.tag.kind = a.kind;
  t.tag.count = perRankCounts(a.kind) ? countsTag(a.layout.data(), a.layout.size()) : a.count;
  t.tag.dtype = static_cast<uint8_t>(a.dtype);
  t.tag.redop = a.preMul && a.op != chorusAvg ? kPreMulSumTag : static_cast<uint8_t>(a.op);  // Note [PreMulSum]
  t.tag.root = a.root;
  if (a.kind == OpKind::Send) {
    t.tag.seq = a.isRecv ? comm.nextRecvSeq(a.root) : comm.nextSendSeq(a.root);
    t.tag.root = -1;  // the peer differs between the two sides
    t.tag.redop = 0;
  } else {
    t.tag.seq = comm.nextCollSeq();
  }
  if (a.kind == OpKind::AllGather || a.kind == OpKind::AllToAll || a.kind == OpKind::AllToAllv ||
      a.kind == OpKind::Broadcast || a.kind == OpKind::Barrier || a.kind == OpKind::Gather ||
      a.kind == OpKind::Scatter || a.kind == OpKind::AllGatherV)
    t.tag.redop = 0;
  return t;
}

namespace {

// AUTO (or CHORUS_ALGO's allowed set) picks the allreduce by the communicator's cost model (Note [Cost model],
// algorithms/cost_model.h). A change of choice from one call to the next is logged with the prediction.
algo::AllReduceAlgo chooseAllReduce(Comm& comm, const CollArgs& a) {
  const size_t bytes = a.count * kernels::dataTypeSize(a.dtype);
  auto choice = static_cast<algo::AllReduceAlgo>(comm.lastAllReduceChoice);
  if (bytes != comm.lastAllReduceBytes) {
    choice = allReduceAlgorithm(comm, bytes);
    if (static_cast<int>(choice) != comm.lastAllReduceChoice)
      CHORUS_INFO(kColl, "{}: AllReduce of {} bytes: {} (predicted {:.1f} us)", comm.name(), bytes,
                  algo::algoName(choice), comm.costModel().allReduceUs(choice, bytes));
    comm.lastAllReduceBytes = bytes;
    comm.lastAllReduceChoice = static_cast<int>(choice);
  }
  comm.flight().algorithm(static_cast<uint8_t>(static_cast<int>(choice) + 1));
  return choice;
}

void allReduce(algo::Context& ctx, const TaggedCall& c, algo::AllReduceAlgo choice) {
  const CollArgs& a = c.args;
  switch (choice) {
    case algo::AllReduceAlgo::Direct: return algo::directAllReduce(ctx, c.tag, a);
    case algo::AllReduceAlgo::RecursiveDoubling: return algo::recursiveDoublingAllReduce(ctx, c.tag, a);
    case algo::AllReduceAlgo::HalvingDoubling: return algo::halvingDoublingAllReduce(ctx, c.tag, a);
    case algo::AllReduceAlgo::Tree: return algo::treeAllReduce(ctx, c.tag, a);
    case algo::AllReduceAlgo::Ring: break;
  }
  algo::ringAllReduce(ctx, c.tag, a);
}

// Note [PreMulSum]: a call with an op of chorusRedOpCreatePreMulSum arrives with op chorusSum, preMul set and this
// rank's scalar (copied at the API, so destroying the op after issuing the call changes nothing). Its input is
// multiplied into scratch memory of the call's space (sendbuff is never written, in place included), and the call
// then runs as an ordinary sum of that, out of place, through every algorithm unchanged. Its tag says premulsum
// (kPreMulSumTag), so a rank calling Sum against one calling PreMulSum meets a mismatch. Device memory gets the
// multiply without a kernel of its own in the memory plugin's ABI: a device scratch filled with the scalar
// (copied once from the host, then doubled by device copies) and a chorusProd reduce, the product rounded as
// chorusProd rounds, as on the host.
// Avg of float16 and bfloat16 runs the same way, as NCCL runs it: each input times 1/nranks rounded to the type
// (kernels::avgScalar), the product taken in float and rounded once, then summed. Summing first and dividing at the
// end, as for the other types, overflows float16 whenever the sum passes 65504 though the average does not. Its tag
// keeps chorusAvg, so Avg against PreMulSum is still a mismatch; it costs a pass over the input into scratch.
constexpr int kPreMulSlot = 3, kScalarSlot = 4;  // scratch slots no algorithm uses

void multiplyInto(algo::Context& ctx, uint8_t* dst, const CollArgs& a, size_t count) {
  if (count == 0) return;  // an empty ReduceScatterV
  if (a.space.isHost()) return kernels::multiply(dst, a.sendbuff, count, a.dtype, &a.scalar);
  const size_t es = kernels::dataTypeSize(a.dtype);
  uint8_t* scalars = ctx.scratch(a.space, count * es, kScalarSlot);
  a.space.copy(scalars, &a.scalar, es);
  for (size_t have = 1; have < count; have *= 2)
    a.space.copy(scalars + have * es, scalars, std::min(have, count - have) * es);
  a.space.reduce(dst, a.sendbuff, scalars, count, a.dtype, chorusProd);
}

TaggedCall preMultiplied(algo::Context& ctx, const TaggedCall& c) {
  const CollArgs& a = c.args;
  const size_t count = a.kind == OpKind::ReduceScatter ? a.count * static_cast<size_t>(ctx.nranks()) : a.count;
  uint8_t* in = ctx.scratch(a.space, count * kernels::dataTypeSize(a.dtype), kPreMulSlot);
  multiplyInto(ctx, in, a, count);
  TaggedCall m = c;
  m.args.sendbuff = in;
  m.args.preMul = false;
  m.args.op = chorusSum;  // Avg's divide is in the scalar
  return m;
}

void runAlgorithm(algo::Context& ctx, const TaggedCall& c, algo::AllReduceAlgo allReduceChoice) {
  const CollArgs& a = c.args;
  switch (a.kind) {
    case OpKind::AllReduce: return allReduce(ctx, c, allReduceChoice);
    case OpKind::ReduceScatter: return algo::ringReduceScatter(ctx, c.tag, a);
    case OpKind::AllGather: return algo::ringAllGather(ctx, c.tag, a);
    case OpKind::Broadcast: return algo::chainBroadcast(ctx, c.tag, a);
    case OpKind::Reduce: return algo::chainReduce(ctx, c.tag, a);
    case OpKind::AllToAll: return algo::directAllToAll(ctx, c.tag, a);
    case OpKind::AllToAllv: return algo::directAllToAllv(ctx, c.tag, a);
    case OpKind::Gather: return algo::directGather(ctx, c.tag, a);
    case OpKind::Scatter: return algo::directScatter(ctx, c.tag, a);
    case OpKind::AllGatherV: return algo::ringAllGatherV(ctx, c.tag, a);
    case OpKind::ReduceScatterV: return algo::ringReduceScatterV(ctx, c.tag, a);
    case OpKind::Barrier: return algo::disseminationBarrier(ctx, c.tag);
    case OpKind::Send:
    case OpKind::Tagged:  // never recorded as a call (lib/comm/tagged.h)
    case OpKind::None: break;
  }
}

void runOne(Comm& comm, const TaggedCall& c) {
  comm.beginCall(c.args.space);
  CHORUS_DEBUG(kColl, "{} {} sendbuff {} recvbuff {}", comm.name(), describe(c.tag), c.args.sendbuff,
               c.args.recvbuff);
  const algo::AllReduceAlgo choice =
      c.args.kind == OpKind::AllReduce ? chooseAllReduce(comm, c.args) : algo::AllReduceAlgo::Ring;
  runCall(comm, c, choice);
}

}  // namespace

algo::AllReduceAlgo allReduceAlgorithm(const Comm& comm, size_t bytes) {
  return comm.costModel().chooseAllReduce(comm.config().algo.allReduce, bytes, nullptr);
}

void runCall(algo::Context& ctx, const TaggedCall& c, algo::AllReduceAlgo allReduceChoice) {
  if (c.args.preMul) return runAlgorithm(ctx, preMultiplied(ctx, c), allReduceChoice);
  runAlgorithm(ctx, c, allReduceChoice);
}

namespace {

// False for a call with nothing to move. It still took its sequence number, so a rank that disagrees about the
// count meets a mismatch at its next message. An AllToAllv always runs: its counts differ per pair (count is 0).
// So do AllGatherV and ReduceScatterV, even with every count 0, so that a rank that disagrees (a count of its own
// list that is not 0) meets the mismatch in this call, from an empty message, instead of waiting for one.
bool movesData(const CollArgs& a) {
  return a.count != 0 || a.kind == OpKind::Barrier || a.kind == OpKind::AllToAllv || perRankCounts(a.kind);
}

// A group's Sends to self and Recvs from self pair up in order and become copies.
void copySelfMessages(Comm& comm, std::span<const TaggedCall> calls) {
  std::vector<const CollArgs*> sends, recvs;
  for (const TaggedCall& c : calls)
    if (c.args.kind == OpKind::Send && c.args.root == comm.rank()) (c.args.isRecv ? recvs : sends).push_back(&c.args);
  if (sends.size() != recvs.size())
    fail(chorusInvalidUsage, "{}: this group has {} Send(s) to self but {} Recv(s) from self; they must pair up",
         comm.name(), sends.size(), recvs.size());
  for (size_t i = 0; i < sends.size(); ++i) {
    const CollArgs &s = *sends[i], &r = *recvs[i];
    if (s.count != r.count || s.dtype != r.dtype)
      fail(chorusInvalidUsage, "{}: Send #{} to self has count {} ({}) but its Recv from self has count {} ({})",
           comm.name(), i, s.count, kernels::dataTypeName(s.dtype), r.count, kernels::dataTypeName(r.dtype));
    (r.space.isHost() ? s.space : r.space).copy(r.recvbuff, s.sendbuff, s.count * kernels::dataTypeSize(s.dtype));
  }
}

}  // namespace

void runCalls(Comm& comm, std::span<const TaggedCall> calls) {
  struct Activity {  // what the heartbeats report (Note [Liveness]) and the flight recorder keeps
    Comm& comm;
    const int unwinding = std::uncaught_exceptions();
    ~Activity() {
      comm.endActivity();
      comm.flight().end(std::uncaught_exceptions() == unwinding);
    }
  } activity{comm};
  if (!calls.empty()) {
    comm.beginActivity(calls.front().tag);
    comm.flight().begin(calls.front().tag, static_cast<uint32_t>(calls.size()));
  }
  if (calls.size() == 1 && calls[0].args.kind != OpKind::Send) {  // one collective, the common case
    if (movesData(calls[0].args)) runOne(comm, calls[0]);
    return;
  }
  copySelfMessages(comm, calls);
  auto remote = [&](const TaggedCall& c) { return c.args.kind == OpKind::Send && c.args.root != comm.rank(); };
  std::vector<Request> p2p;  // reserved up front: posted requests must not move
  p2p.reserve(static_cast<size_t>(std::count_if(calls.begin(), calls.end(), remote)));
  for (const TaggedCall& c : calls) {
    if (c.args.kind == OpKind::Send && c.args.root == comm.rank()) continue;
    if (!movesData(c.args)) continue;
    if (c.args.kind == OpKind::Send) {
      p2p.emplace_back();
      comm.beginCall(c.args.space);
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
