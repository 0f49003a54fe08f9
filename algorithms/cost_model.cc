#include "algorithms/cost_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "algorithms/fold.h"
#include "algorithms/tree_shape.h"
#include "lib/base/env.h"
#include "lib/base/log.h"

namespace chorus::algo {

const char* algoName(AllReduceAlgo a) {
  switch (a) {
    case AllReduceAlgo::Direct: return "direct";
    case AllReduceAlgo::RecursiveDoubling: return "recursive doubling";
    case AllReduceAlgo::HalvingDoubling: return "halving-doubling";
    case AllReduceAlgo::Ring: return "ring";
    case AllReduceAlgo::Tree: return "tree";
  }
  return "?";
}

unsigned algoBit(AllReduceAlgo a) {
  switch (a) {
    case AllReduceAlgo::Ring: return kAlgoRing;
    case AllReduceAlgo::Tree: return kAlgoTree;
    default: return kAlgoOther;
  }
}

// Ranks of one host, measured with all_reduce_perf on this project's 2-core VMs (alpha: 8-byte latency per
// step; beta: 2-rank ring busbw at 1-16 MiB). Oversubscribed (more ranks than cores): every step waits for the
// peer to be scheduled (4 ranks, 8 B: ~10 us over shm, ~35 us per step over TCP).
namespace {

int floorLog2(int n) {
  int k = 0;
  while ((2 << k) <= n) ++k;
  return k;
}

}  // namespace

double CostModel::allReduceUs(AllReduceAlgo a, size_t bytes) const {
  const double S = static_cast<double>(bytes), n = nranks;
  const LinkCost& link = hosts > 1 ? net : local;
  const double bw = link.gbps * 1e3, red = reduceGBps * 1e3;  // bytes per microsecond
  const int p = 1 << floorLog2(nranks);
  const int fold = p == nranks ? 0 : 2;
  if (nranks == 1) return S / (local.gbps * 1e3);
  switch (a) {
    case AllReduceAlgo::Ring: {
      // Pipelined in C chunks of time t per segment: the first chunk's path of 2(n-1) hops, each alpha + t, then
      // the others one t apart; or, where the links never wait, 2(n-1) C t (the segments) after one alpha. The
      // reduction of one chunk overlaps the transfer of the next. (The plain sum 2(n-1) alpha + bytes / beta
      // came out 19-25% above the measured time at 512 KiB-1 MiB on 4 and 8 simulated hosts.)
      const double steps = 2 * (n - 1), seg = S / n;
      const double C = std::max(1.0, std::ceil(seg / static_cast<double>(chunkAt(chunks, bytes)))), t = seg / C / bw;
      return std::max(steps * (link.alphaUs + t) + (C - 1) * t,
                      link.alphaUs + std::max(steps * C * t, (n - 1) / n * S / red));
    }
    case AllReduceAlgo::Tree: {
      // A pipeline of k chunks per tree: the first chunk's path (up and down: hops of alpha plus a chunk's time
      // on its link), then one period of the busiest link per further chunk. On one kind of link that is
      //     latency + steps t + (k - 1) treeLoad t = latency + treeLoad (S/2) / beta + (steps - treeLoad) t.
      // Across hosts the host tree's hops cross the net and the chains' stay inside a host, and the period is the
      // busier of the host's link to the others (treeHostLoad chunks) and a rank's link inside its host (treeLoad
      // chunks): 2 hosts x 2 ranks, 16 MiB at 1 Gbit/s measured 141 ms, S / beta, where charging the chain's
      // load to the net predicted twice that and picked the ring (211 ms, 1.5 S / beta).
      const double chunk = std::min(S / 2, static_cast<double>(treeChunkBytes(bytes, chunkAt(chunks, bytes))));
      const double latency = 2 * (hostTreeDepth * net.alphaUs + (maxPerHost - 1) * local.alphaUs);
      const double k = std::max(1.0, S / 2 / chunk), localBw = local.gbps * 1e3;
      if (hosts == 1) {
        const int steps = 2 * (maxPerHost - 1);
        return latency + std::max((treeLoad * S / 2 + (steps - treeLoad) * chunk) / bw, S / red);
      }
      const double path = 2 * hostTreeDepth * chunk / bw + 2 * (maxPerHost - 1) * chunk / localBw;
      const double period = std::max(treeHostLoad * chunk / bw, (maxPerHost > 1 ? treeLoad : 0) * chunk / localBw);
      return latency + std::max(path + (k - 1) * period, S / red);
    }
    case AllReduceAlgo::RecursiveDoubling: {
      // In a step that crosses hosts every rank of a host sends off it at once: maxPerHost buffers on its link
      // (docs/results/2026-12-07-fenced-publishes.md, 32 KiB).
      const int steps = floorLog2(p) + fold, localSteps = hosts > 1 ? rdLocalSteps : 0;
      const double onLink = hosts > 1 ? maxPerHost * S : S;
      return localSteps * (local.alphaUs + S / (local.gbps * 1e3)) +
             (steps - localSteps) * (link.alphaUs + onLink / bw) + floorLog2(p) * S / red;
    }
    case AllReduceAlgo::HalvingDoubling: {
      const double pd = p;
      return (2 * floorLog2(p) + fold) * link.alphaUs + (2 * (pd - 1) / pd * S + fold * S) / bw +
             ((pd - 1) / pd + (fold != 0 ? 1 : 0)) * S / red;
    }
    case AllReduceAlgo::Direct:
      if (!directAllowed) return std::numeric_limits<double>::infinity();
      return local.alphaUs + (n - 1) * S / (local.gbps * 1e3) + (n - 1) * S / red;
  }
  return std::numeric_limits<double>::infinity();
}

namespace {

// On one host the alpha-beta form misses what decides there (caches, a reduction that competes with the copy
// for the same core), so AUTO keeps sizes measured with all_reduce_perf on this project's 2-core machines:
// the direct exchange wins up to 4 KiB (4 ranks on 2 cores over shm, 8 B: 14.1 against 17.6 us; at 32 KiB it
// loses, 29 against 22 us); recursive doubling up to 256 KiB (TCP: 67/225/323/1078 against the ring's
// 74/385/612/1809 us for 2/3/4/8 ranks; shm, 2 ranks, 16 KiB: 7.2 against 3.6 GB/s busbw, 64 KiB 8.6 against
// 6.6), and for 2 ranks over shm up to 512 KiB (below); halving-doubling up to 2 MiB with 4+ ranks (TCP 1 MiB, 4 ranks: 1.1 against 2.0 ms; shm 512 KiB 3.2
// against 2.3 GB/s busbw); the pipelined ring above (shm, 4 ranks, 4 MiB: 2.8 against 2.4 GB/s).
AllReduceAlgo measuredOneHostChoice(const CostModel& m, size_t bytes) {
  if (bytes <= 4096 && m.directAllowed) return AllReduceAlgo::Direct;
  // Two ranks over shm: one exchange of the whole buffer beats the ring's two phases up to 512 KiB (64 KiB slots;
  // 2 ranks, 512 KiB, busbw GB/s in three interleaved runs: 14.6/13.4/14.6 against 12.5/12.1/12.6).
  // With 4+ ranks over links that stage every receive (tcp, UCX), halving-doubling from 256 KiB already: it moves
  // less than recursive doubling's log2(n) whole buffers (docs/ucx-results.md, "Halving-doubling").
  const size_t rdMax = m.nranks == 2 && m.reduceOnReceive   ? 512 * 1024
                       : m.nranks >= 4 && !m.reduceOnReceive ? 128 * 1024
                                                             : 256 * 1024;
  if (bytes <= rdMax) return AllReduceAlgo::RecursiveDoubling;
  if (m.nranks >= 4 && bytes <= 2 * 1024 * 1024) return AllReduceAlgo::HalvingDoubling;
  return AllReduceAlgo::Ring;
}

}  // namespace

AllReduceAlgo CostModel::chooseAllReduce(unsigned allowed, size_t bytes, double* us) const {
  AllReduceAlgo best = AllReduceAlgo::Ring;
  double bestUs = std::numeric_limits<double>::infinity();
  if (hosts == 1 && (allowed & kAlgoOther) != 0 && (allowed & kAlgoRing) != 0) {
    best = measuredOneHostChoice(*this, bytes);
    if (us != nullptr) bestUs = allReduceUs(best, bytes);
  } else {
    // Across hosts the unpipelined algorithms (recursive doubling, halving-doubling: every step moves its whole
    // piece before the next starts) must be predicted kUnpipelinedMargin faster than the ring and the tree. On the
    // simulated cluster (8 hosts, 1 Gbit/s, 0.5 ms) halving-doubling ran 7-10% slower than predicted from 512 KiB
    // to 8 MiB (2 MiB: 39.3 ms against the ring's 36.8; 8 MiB: 143.6 against 130.1); where they win by more than
    // the margin (8 B to 512 KiB) they still win measured.
    constexpr double kUnpipelinedMargin = 0.85;
    const double margin = hosts > 1 ? kUnpipelinedMargin : 1.0;
    AllReduceAlgo other = AllReduceAlgo::Ring;
    double otherUs = std::numeric_limits<double>::infinity();
    for (AllReduceAlgo a : kAllReduceAlgos) {
      if ((algoBit(a) & allowed) == 0) continue;
      const double t = allReduceUs(a, bytes);
      if (a == AllReduceAlgo::Ring || a == AllReduceAlgo::Tree) {
        if (t < bestUs) best = a, bestUs = t;
      } else if (t < otherUs) {
        other = a, otherUs = t;
      }
    }
    if (otherUs < margin * bestUs) best = other, bestUs = otherUs;
  }
  if (us != nullptr) *us = bestUs;
  return best;
}

std::vector<CostModel::Crossover> CostModel::crossovers(unsigned allowed) const {
  std::vector<Crossover> out;
  for (size_t b = 8; b <= (size_t{1} << 30); b *= 2) {
    double us = 0;
    AllReduceAlgo a = chooseAllReduce(allowed, b, &us);
    if (out.empty() || out.back().algo != a) out.push_back({b, a, us});
  }
  return out;
}

int recursiveDoublingLocalSteps(const std::vector<int>& hostOf) {
  const int n = static_cast<int>(hostOf.size());
  const PowerOfTwoFold fold(n, 0);  // its mapping of active ranks to ranks does not depend on the rank
  auto together = [&](int a, int b) { return hostOf[static_cast<size_t>(a)] == hostOf[static_cast<size_t>(b)]; };
  int steps = 0;
  bool foldTogether = true;  // the even ranks 2i < 2(n - p) hand their buffer to 2i + 1, and get the result back
  for (int r = 0; r < 2 * (n - fold.p()); r += 2) foldTogether = foldTogether && together(r, r + 1);
  if (n != fold.p() && foldTogether) steps += 2;
  for (int mask = 1; mask < fold.p(); mask <<= 1) {
    bool all = true;
    for (int a = 0; a < fold.p(); ++a) all = all && together(fold.realRank(a), fold.realRank(a ^ mask));
    steps += all ? 1 : 0;
  }
  return steps;
}

std::string CostModel::describe() const {
  std::string s = fmt::format("{} ranks on {} host(s), at most {} per host; local alpha {:.1f} us beta {:.1f} GB/s",
                              nranks, hosts, maxPerHost, local.alphaUs, local.gbps);
  if (hosts > 1)
    s += fmt::format("; net alpha {:.1f} us beta {:.3f} GB/s; host tree depth {}; recursive doubling steps inside "
                     "hosts {}", net.alphaUs, net.gbps, hostTreeDepth, rdLocalSteps);
  return s;
}

}  // namespace chorus::algo
