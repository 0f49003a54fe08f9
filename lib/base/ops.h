// The vocabulary the algorithms and the transports share: what an operation is (OpKind, CollArgs), the tag
// its every message carries (OpTag, Note [Message tags] in transports/transport.h), a posted message's
// completion flag (Request) and a pipeline chunk that depends on the size (ChunkSteps).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "chorus/chorus.h"
#include "lib/mem/space.h"

namespace chorus {

// Values travel in every message's tag (and a plugin's): new kinds go at the end.
enum class OpKind : uint8_t {
  None = 0, AllReduce, Broadcast, Reduce, AllGather, ReduceScatter, AllToAll, Send, Barrier, AllToAllv, Tagged,
  Gather, Scatter, AllGatherV, ReduceScatterV
};
// The kinds with a count per rank (CollArgs::layout), whose tag's count is countsTag of those counts.
inline bool perRankCounts(OpKind k) { return k == OpKind::AllGatherV || k == OpKind::ReduceScatterV; }

struct OpTag {
  uint64_t seq = 0;    // collective sequence number, or the n-th Send/Recv between this pair
  uint64_t count = 0;  // the call's count argument
  int32_t root = -1;
  OpKind kind = OpKind::None;
  uint8_t dtype = 0;
  uint8_t redop = 0;
  uint8_t pad = 0;  // explicit, so that the plugin ABI's tag (transports/plugin.h) is this struct bit for bit
  bool operator==(const OpTag&) const = default;
};
std::string describe(const OpTag& tag);  // "AllReduce (call #5, count 10, float32, sum)"
const char* opKindName(OpKind k);        // "AllReduce", "Send/Recv", ...

// A tag's redop for PreMulSum: the call reduces with chorusSum, but a rank calling Sum against one calling
// PreMulSum must meet a mismatch (Note [Message tags]).
constexpr uint8_t kPreMulSumTag = chorusNumOps;
std::string redOpTagName(uint8_t redop);  // "sum" ... "bxor", "premulsum"; "op #N" otherwise

// Note [Counts in tags]: the kinds with a count per rank (AllGatherV, ReduceScatterV) put in their tag's count,
// instead of one count, the total of the counts (its low 40 bits; saturated) and a 24-bit fingerprint of the
// whole list (above them), so ranks that pass different counts meet a mismatch at their first message, whatever
// they disagree on, and describe() can still say how many elements each call moves.
uint64_t countsTag(const size_t* counts, size_t n);
constexpr int kCountsTotalBits = 40;
inline uint64_t countsTotal(uint64_t tag) { return tag & ((uint64_t{1} << kCountsTotalBits) - 1); }
inline uint32_t countsFingerprint(uint64_t tag) { return static_cast<uint32_t>(tag >> kCountsTotalBits); }

// Note [Message classes]: between two ranks, messages form two classes, each delivered in the order it was
// posted and each travelling apart from the other: tagged point-to-point's (kind Tagged: lib/comm/tagged.h) and
// everyone else's. Every transport keeps them apart (shm: a FIFO pair per class; tcp: a connection for tagged
// messages; ucx: a UCP tag class each), so a message waiting for its receive in one class never holds up the
// other: tagged messages, which the receiver takes in whatever order they come, neither wait behind a collective
// that has not started on this rank nor stand in its way. Tagged messages are an envelope (seq counts this pair's
// tagged messages, count 0, root kEnvelopeRoot) and, unless empty, its payload (count bytes).
constexpr int kMessageClasses = 2;
constexpr int32_t kEnvelopeRoot = -2;
inline int messageClass(const OpTag& t) { return t.kind == OpKind::Tagged ? 1 : 0; }
// The receive of a peer's next envelope, posted for the communicator's life into memory of the communicator's
// own (Request::optional says whether anything waits for it).
inline bool standing(const OpTag& t) { return t.kind == OpKind::Tagged && t.root == kEnvelopeRoot; }

// The OpTag a transport's message header repeats (any header with these six fields).
template <typename Header>
OpTag tagOf(const Header& h) {
  OpTag t;
  t.seq = h.seq;
  t.count = h.count;
  t.root = h.root;
  t.kind = static_cast<OpKind>(h.kind);
  t.dtype = h.dtype;
  t.redop = h.redop;
  return t;
}

// Completion flag owned by the caller; must outlive the operation it was posted with.
struct Request {
  bool done = false;
  // Set by the poster of a receive: nothing waits for it yet, so a peer that leaves while only such receives
  // are posted with it has left nothing undone (tagged point-to-point's standing envelope receive, while no
  // receive waits for a message from that peer). Transports read it when a peer goes.
  bool optional = false;
  int pendingParts = 0;  // transport-private bookkeeping
};

// A receive a peer may leave behind (Request::optional). Only a standing receive can be: its Request is the
// communicator's, alive for as long as the transport, where another's may be gone once its operation ended.
inline bool optional(const OpTag& t, const Request* req) { return standing(t) && req->optional; }

// One recorded call, as validated at the API. Its fields are ordered to keep it small: a queued call is stored
// in its task (Note [Allocation-free queueing] in lib/api/group.cc).
struct CollArgs {
  OpKind kind = OpKind::None;
  const void* sendbuff = nullptr;
  void* recvbuff = nullptr;
  // The call's count argument (per-rank block for AllGather/ReduceScatter/AllToAll/Gather/Scatter); for
  // AllGatherV/ReduceScatterV the sum of the counts.
  size_t count = 0;
  chorusDataType_t dtype = chorusFloat32;
  chorusRedOp_t op = chorusSum;  // a built-in op (a PreMulSum's is chorusSum, with preMul set; so is Avg's of
                                 // float16 and bfloat16, with chorusAvg)
  int root = -1;  // Broadcast/Reduce/Gather/Scatter root, or the peer of a Send/Recv
  bool isRecv = false;  // Send kind only: this side receives
  // PreMulSum (Note [PreMulSum] in lib/comm/collectives.cc): the input is first multiplied by this rank's
  // scalar, `scalar`'s first dtype-size bytes.
  bool preMul = false;
  mem::Space space = {};  // where sendbuff and recvbuff live (classified once, at the API)
  // In elements, copied at the API (the caller's arrays need not outlive the call): AllToAllv's sendcounts,
  // sdispls, recvcounts, rdispls (nranks entries each); AllGatherV's and ReduceScatterV's recvcounts.
  std::vector<size_t> layout = {};
  uint64_t scalar = 0;
};

// A pipeline chunk by size: steps of ascending fromBytes, the first from 0; a size takes the chunk of the last
// step it reaches. A transport states its steps by the bytes a collective touches on one host (its buffer times
// the ranks there: LinkTraits::chunks); the communicator turns them into steps by buffer size for the algorithms.
struct ChunkStep {
  size_t fromBytes = 0;
  size_t chunkBytes = 0;
};
using ChunkSteps = std::vector<ChunkStep>;
constexpr size_t kMinChunkBytes = 4096, kMaxChunkBytes = size_t{64} << 20;  // what a chunk may be

inline size_t chunkAt(const ChunkSteps& steps, size_t bytes) {
  size_t chunk = steps.empty() ? 0 : steps.front().chunkBytes;
  for (const ChunkStep& s : steps)
    if (bytes >= s.fromBytes) chunk = s.chunkBytes;
  return chunk;
}

}  // namespace chorus
