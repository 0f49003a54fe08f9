// chorus_model: the allreduce cost model of algorithms/cost_model.h (the alpha-beta timeline model of the
// DDP lecture in ../shared/seeds, 002 §3) evaluated for 2..1024 ranks, one per host, from a link's alpha and
// beta: predicted ring and tree times at a few sizes and the size from which the ring wins. The same code AUTO
// runs, so scripts/validate_model.py can hold its predictions against netns-cluster measurements.
//
// usage: chorus_model --alpha-us A --gbps B [--max-ranks N] [--chunk BYTES]
//   e.g. chorus_model --alpha-us 550 --gbps 0.117   (1 Gbit/s links with 0.5 ms delay)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "algorithms/cost_model.h"
#include "algorithms/tree_shape.h"
#include "lib/base/env.h"
#include "transports/registry.h"

using namespace chorus;
using algo::AllReduceAlgo;

int main(int argc, char** argv) {
  double alpha = -1, gbps = -1;
  int maxRanks = 1024;
  size_t chunk = 96 * 1024;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--alpha-us") alpha = std::atof(argv[i + 1]);
    else if (k == "--gbps") gbps = std::atof(argv[i + 1]);
    else if (k == "--max-ranks") maxRanks = std::atoi(argv[i + 1]);
    else if (k == "--chunk") chunk = static_cast<size_t>(std::atoll(argv[i + 1]));
    else {
      std::fprintf(stderr, "chorus_model: unknown option '%s'\n", argv[i]);
      return 2;
    }
  }
  if (alpha <= 0 || gbps <= 0 || maxRanks < 2) {
    std::fprintf(stderr, "usage: chorus_model --alpha-us A --gbps B [--max-ranks N] [--chunk BYTES]\n");
    return 2;
  }
  const size_t sizes[] = {8, 1 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20, 256 << 20};
  std::printf("# alpha %.1f us, beta %.3f GB/s, one rank per host, chunk %zu; predicted us (ring / tree)\n", alpha,
              gbps, chunk);
  std::printf("%6s %5s", "ranks", "depth");
  for (size_t s : sizes) std::printf(" %23zu", s);
  std::printf(" %14s\n", "ring wins from");
  for (int n = 2; n <= maxRanks; n *= 2) {
    algo::CostModel m;
    m.nranks = n;
    m.hosts = n;
    m.maxPerHost = 1;
    const algo::DoubleTreeStats trees = algo::doubleTreeStats(n);
    m.hostTreeDepth = trees.depth;
    m.treeLoad = m.treeHostLoad = trees.load;
    m.net = {alpha, gbps};
    if (const chorus::transport::Descriptor* shm = chorus::transport::find("shm"))
      m.local = {shm->traits.alphaUs, shm->traits.gbps};
    m.chunks = {{0, chunk}};
    std::printf("%6d %5d", n, m.hostTreeDepth);
    for (size_t s : sizes)
      std::printf(" %11.0f / %9.0f", m.allReduceUs(AllReduceAlgo::Ring, s), m.allReduceUs(AllReduceAlgo::Tree, s));
    size_t from = 0;
    for (size_t s = 8; s <= (size_t{1} << 34); s *= 2)
      if (m.chooseAllReduce(kAlgoRing | kAlgoTree, s) == AllReduceAlgo::Ring) {
        from = s;
        break;
      }
    if (from) std::printf(" %14zu\n", from);
    else std::printf(" %14s\n", "never");
  }
  return 0;
}
