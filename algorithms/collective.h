// Entry points of the algorithms. Each runs on the communicator's executing thread, talks to peers only
// through Comm::isend/irecv/waitUntil, and returns when this rank's part of the operation is complete.
#pragma once

#include <cstddef>

#include "chorus/chorus.h"
#include "lib/comm.h"

namespace chorus::algo {

// One recorded call, as validated at the API.
struct CollArgs {
  OpKind kind = OpKind::None;
  const void* sendbuff = nullptr;
  void* recvbuff = nullptr;
  size_t count = 0;  // the call's count argument (per-rank block for AllGather/ReduceScatter/AllToAll)
  chorusDataType_t dtype = chorusFloat32;
  chorusRedOp_t op = chorusSum;
  int root = -1;  // Broadcast/Reduce root, or the peer of a Send/Recv
  bool isRecv = false;  // Send kind only: this side receives
};

// algorithms/ring.cc: pipelined ring (Note [Ring] there).
void ringAllReduce(Comm& comm, const OpTag& tag, const CollArgs& a);
void ringReduceScatter(Comm& comm, const OpTag& tag, const CollArgs& a);
void ringAllGather(Comm& comm, const OpTag& tag, const CollArgs& a);
// algorithms/tree.cc: double binary tree (Note [Double binary tree] there).
void treeAllReduce(Comm& comm, const OpTag& tag, const CollArgs& a);
// algorithms/recursive_doubling.cc: latency-optimal allreduce for small messages.
void recursiveDoublingAllReduce(Comm& comm, const OpTag& tag, const CollArgs& a);
// algorithms/halving_doubling.cc: Rabenseifner's allreduce for mid-sized messages.
void halvingDoublingAllReduce(Comm& comm, const OpTag& tag, const CollArgs& a);
// algorithms/chain.cc: pipelined chains from / to the root.
void chainBroadcast(Comm& comm, const OpTag& tag, const CollArgs& a);
void chainReduce(Comm& comm, const OpTag& tag, const CollArgs& a);
// algorithms/direct.cc: every pair at once.
void directAllReduce(Comm& comm, const OpTag& tag, const CollArgs& a);
void directAllToAll(Comm& comm, const OpTag& tag, const CollArgs& a);
void disseminationBarrier(Comm& comm, const OpTag& tag);
// Posts a Send or Recv without waiting (used by groups, whose members complete together).
void postPointToPoint(Comm& comm, const OpTag& tag, const CollArgs& a, Request* req);

}  // namespace chorus::algo
