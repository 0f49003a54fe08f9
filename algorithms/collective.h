// Entry points of the algorithms. Each runs on the communicator's executing thread, talks to peers only
// through Context (algorithms/context.h), and returns when this rank's part of the operation is complete.
#pragma once

#include <cstddef>

#include "chorus/chorus.h"
#include "algorithms/context.h"

namespace chorus::algo {

// algorithms/ring.cc: pipelined ring (Note [Ring] there).
void ringAllReduce(Context& ctx, const OpTag& tag, const CollArgs& a);
void ringReduceScatter(Context& ctx, const OpTag& tag, const CollArgs& a);
void ringAllGather(Context& ctx, const OpTag& tag, const CollArgs& a);
// The same rings over a count per rank (a.layout), rank p's block at the sum of the counts before it.
void ringReduceScatterV(Context& ctx, const OpTag& tag, const CollArgs& a);
void ringAllGatherV(Context& ctx, const OpTag& tag, const CollArgs& a);
// algorithms/tree.cc: double binary tree (Note [Double binary tree] there).
void treeAllReduce(Context& ctx, const OpTag& tag, const CollArgs& a);
// algorithms/recursive_doubling.cc: latency-optimal allreduce for small messages.
void recursiveDoublingAllReduce(Context& ctx, const OpTag& tag, const CollArgs& a);
// algorithms/halving_doubling.cc: Rabenseifner's allreduce for mid-sized messages.
void halvingDoublingAllReduce(Context& ctx, const OpTag& tag, const CollArgs& a);
// algorithms/chain.cc: pipelined chains from / to the root.
void chainBroadcast(Context& ctx, const OpTag& tag, const CollArgs& a);
void chainReduce(Context& ctx, const OpTag& tag, const CollArgs& a);
// algorithms/direct.cc: every pair at once.
void directAllReduce(Context& ctx, const OpTag& tag, const CollArgs& a);
void directAllToAll(Context& ctx, const OpTag& tag, const CollArgs& a);
void directAllToAllv(Context& ctx, const OpTag& tag, const CollArgs& a);
void directGather(Context& ctx, const OpTag& tag, const CollArgs& a);
void directScatter(Context& ctx, const OpTag& tag, const CollArgs& a);
void disseminationBarrier(Context& ctx, const OpTag& tag);
// Posts a Send or Recv without waiting (used by groups, whose members complete together).
void postPointToPoint(Context& ctx, const OpTag& tag, const CollArgs& a, Request* req);

}  // namespace chorus::algo
