// Builds a communicator's cost model (Note [Cost model], algorithms/cost_model.h): topology from the host
// identities, local link costs from the table, and the link between hosts measured once at creation.
#pragma once

#include <vector>

#include "algorithms/cost_model.h"
#include "lib/base/ops.h"
#include "transports/registry.h"

namespace chorus {

class Comm;

// Collective (every rank calls it once the peers are connected). When the communicator spans several hosts,
// the first ranks of hosts 2k and 2k+1 ping-pong 1 MiB messages (after a warm-up round; median of 3) for beta,
// and the first ranks of all hosts exchange 8 bytes with their ring neighbours in 8 lockstep rounds for alpha,
// the cost of one step of a collective when every host is busy. Then all ranks agree with an allreduce on those figures and on whether any host runs more ranks than cores, so that every rank predicts
// alike and picks the same algorithm. `oversubscribedHere`: this host runs more ranks than this process has cores.
algo::CostModel buildCostModel(Comm& comm, bool oversubscribedHere);

// The pipeline chunk by buffer size, the same on every rank so that messages of a chunk match in length: at each
// size the smallest chunk asked for by a transport serving a pair (`used`; their steps count the bytes touched on
// one host, the buffer times `maxPerHost`; their oversubscribed steps when `oversubscribed`: a single host with
// more ranks than cores, which every rank sees alike), at most kCrossHostMaxChunk when the communicator spans
// hosts.
ChunkSteps chooseChunks(const std::vector<const transport::LinkTraits*>& used, int maxPerHost, bool crossHost,
                        bool oversubscribed = false);
// A transport's chunk is what suits it inside a host. Between hosts the ring is latency-bound sooner and needs
// several chunks per segment to pipeline: tcp's 96 KiB serves UCX there too (docs/ucx-results.md, "Chunk across
// hosts").
constexpr size_t kCrossHostMaxChunk = 96 * 1024;

}  // namespace chorus
