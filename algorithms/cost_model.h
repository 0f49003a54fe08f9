// Note [Cost model]:
// AUTO picks an allreduce algorithm per call by predicted time in the alpha-beta(-gamma) form:
//     time = alpha * latency steps + bytes on the busiest link / beta + bytes reduced by one rank / gamma
// where the pipelined algorithms (ring, tree) overlap the three terms as described below,
// with (alpha, beta) per kind of link: `local` between ranks of one host (the numbers the transport serving
// them gives, transports/registry.h, measured on this project's 2-core machines) and `net` between hosts (measured when the
// communicator is created: buildCostModel, lib/comm/tuning.cc). Steps and bytes per algorithm, n ranks, S bytes:
//   ring   2(n-1) steps, 2(n-1)/n S on each link, (n-1)/n S reduced; pipelined in chunks, so the steps'
//          latency overlaps the transfer where a segment has several chunks (the larger of the first chunk's
//          path and the links' busy time)
//   tree   2 * (depth of the host tree + ranks per host - 1) steps, 2S on an interior rank's link (S with 2
//          hosts: treeLoad), S reduced, overlapped; pipelined: the first chunk's path, then one period of the
//          busiest link per further chunk (Note [Double binary tree], algorithms/tree.cc). Across hosts the
//          busiest link is the busier of a host's link to the others (treeHostLoad: the host tree's load; the
//          chains inside hosts do not cross it) and a rank's link inside its host (treeLoad)
//   recursive doubling   log2(p) steps (+2 folding n onto a power of two p) of the whole buffer each; a step
//                        whose pairs all share a host costs the local link (rdLocalSteps: with hosts of 2^k
//                        ranks numbered host by host, the first k); one that crosses carries every rank's
//                        buffer of a host on the host's link
//   halving-doubling     2 log2(p) steps (+2), 2(p-1)/p S (+2S folding), (p-1)/p S reduced
//   direct (shm only, n > 2)   1 step, (n-1) S sent and reduced
// A step that crosses hosts costs the net link; with more than one host every algorithm but the tree and
// recursive doubling crosses hosts at every step. On one host the model still predicts, but AUTO keeps the
// sizes measured there (measuredOneHostChoice in cost_model.cc): the alpha-beta form cannot see the caches and
// the reduction competing with the copy for one core, which decide between the algorithms on one machine
// (fitting it would need a different alpha and beta per algorithm). chorus_info prints the crossovers for the
// current communicator.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "lib/base/ops.h"

namespace chorus::algo {

enum class AllReduceAlgo { Direct, RecursiveDoubling, HalvingDoubling, Ring, Tree };
// In order of preference when predictions tie.
constexpr AllReduceAlgo kAllReduceAlgos[] = {AllReduceAlgo::Ring, AllReduceAlgo::Tree, AllReduceAlgo::HalvingDoubling,
                                             AllReduceAlgo::RecursiveDoubling, AllReduceAlgo::Direct};
const char* algoName(AllReduceAlgo a);  // "direct", "recursive doubling", ...

struct LinkCost {
  double alphaUs = 1;  // one message's latency, microseconds
  double gbps = 1;     // bandwidth, GB/s (bytes per nanosecond)
};

struct CostModel {
  int nranks = 1;
  int hosts = 1;
  int maxPerHost = 1;     // ranks on the most populated host
  int hostTreeDepth = 0;  // edges on the deepest root-to-leaf path of the host-level double binary tree
  int treeLoad = 4;       // half-buffers the busiest rank sends in the two trees (2 with 2 hosts, else 4+)
  int treeHostLoad = 4;   // half-buffers the busiest host sends to other hosts in the two trees (hosts > 1)
  int rdLocalSteps = 0;   // steps of recursive doubling in which no pair crosses hosts (hosts > 1)
  bool reduceOnReceive = false;  // every pair's transport reduces while receiving (shm): no staging copies
  bool directAllowed = false;    // reduceOnReceive and n > 2
  LinkCost local;         // between ranks of one host
  LinkCost net;           // between hosts (meaningful when hosts > 1)
  double reduceGBps = 30;  // reduction kernel (cache-resident), bytes of output per ns
  ChunkSteps chunks = {{0, 96 * 1024}};  // the pipeline chunk by buffer size (Context::chunkBytes)

  // Predicted microseconds for an allreduce of `bytes`; infinity when the algorithm cannot run here.
  double allReduceUs(AllReduceAlgo a, size_t bytes) const;
  // The fastest algorithm among `allowed` (AlgoBits of lib/base/env.h) and its predicted time.
  AllReduceAlgo chooseAllReduce(unsigned allowed, size_t bytes, double* us = nullptr) const;

  struct Crossover {
    size_t fromBytes;  // the choice from this size (a power of two) up to the next crossover
    AllReduceAlgo algo;
    double us;         // predicted time at fromBytes
  };
  // The choices over 8 B .. 1 GiB in powers of two, one entry per change.
  std::vector<Crossover> crossovers(unsigned allowed) const;
  std::string describe() const;  // "8 ranks on 8 hosts; local a=... b=...; net ..."
};

// The steps of recursive doubling over ranks on hosts hostOf[r] (folding included, algorithms/fold.h) in which
// every pair of ranks shares a host: CostModel::rdLocalSteps.
int recursiveDoublingLocalSteps(const std::vector<int>& hostOf);

// bits of lib/base/env.h's AlgoBits that an algorithm needs
unsigned algoBit(AllReduceAlgo a);

}  // namespace chorus::algo
