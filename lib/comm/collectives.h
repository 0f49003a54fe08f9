// Chooses and runs the algorithm for one recorded call (the executing thread's entry into algorithms/).
#pragma once

#include <span>

#include "algorithms/collective.h"
#include "algorithms/cost_model.h"
#include "lib/comm/comm.h"

namespace chorus {

struct TaggedCall {
  CollArgs args;
  OpTag tag;
};

// Takes the call's sequence number now, in issue order (Note [Issue order]).
TaggedCall tagCall(Comm& comm, const CollArgs& args);
// The allreduce algorithm the cost model picks for `bytes` (AUTO, or CHORUS_ALGO's allowed set); any thread.
algo::AllReduceAlgo allReduceAlgorithm(const Comm& comm, size_t bytes);
// Runs one collective's algorithm against ctx, an AllReduce with `allReduceChoice`: the communicator itself, or a
// context that only looks at what the algorithm asks for (Note [Scratch before the fence] in scratch_plan.cc).
void runCall(algo::Context& ctx, const TaggedCall& c, algo::AllReduceAlgo allReduceChoice);
// Runs the calls together: Send/Recv are all posted, collectives run in order, then everything is awaited.
void runCalls(Comm& comm, std::span<const TaggedCall> calls);

}  // namespace chorus
