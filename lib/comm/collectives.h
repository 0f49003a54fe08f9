// Chooses and runs the algorithm for one recorded call (the executing thread's entry into algorithms/).
#pragma once

#include <span>

#include "algorithms/collective.h"
#include "lib/comm/comm.h"

namespace chorus {

struct TaggedCall {
  CollArgs args;
  OpTag tag;
};

// Takes the call's sequence number now, in issue order (Note [Issue order]).
TaggedCall tagCall(Comm& comm, const CollArgs& args);
// Runs the calls together: Send/Recv are all posted, collectives run in order, then everything is awaited.
void runCalls(Comm& comm, std::span<const TaggedCall> calls);

}  // namespace chorus
