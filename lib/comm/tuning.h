// Builds a communicator's cost model (Note [Cost model], algorithms/cost_model.h): topology from the host
// identities, local link costs from the table, and the link between hosts measured once at creation.
#pragma once

#include "algorithms/cost_model.h"

namespace chorus {

class Comm;

// Collective (every rank calls it once the peers are connected). When the communicator spans several hosts,
// the first ranks of hosts 2k and 2k+1 ping-pong 1 MiB messages (after a warm-up round; median of 3) for beta,
// and the first ranks of all hosts exchange 8 bytes with their ring neighbours in 8 lockstep rounds for alpha,
// the cost of one step of a collective when every host is busy. Then all ranks agree with an allreduce on those figures and on whether any host runs more ranks than cores, so that every rank predicts
// alike and picks the same algorithm. `oversubscribedHere`: this host runs more ranks than this process has cores.
algo::CostModel buildCostModel(Comm& comm, bool oversubscribedHere);

}  // namespace chorus
