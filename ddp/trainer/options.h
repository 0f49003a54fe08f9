// chorus_ddp_train's command line.
#pragma once

#include <cstdint>
#include <string>

namespace chorus::ddp::trainer {

struct Options {
  int steps = 20, layers = 4, width = 256, features = 32, classes = 10, batch = 64;
  double lr = 0.05, momentum = 0.9;
  double bucketCapMb = 25, firstBucketMb = 1;
  int noSync = 1;          // micro-batches per optimizer step; the first noSync-1 under no_sync
  int unusedEvery = 0;     // skip the branch every N steps (needs findUnused)
  bool findUnused = false, uneven = false, noOverlap = false, view = false, check = false, quiet = false;
  int compress = -1;       // -1, or chorusFloat16 / chorusBfloat16
  uint64_t seed = 1;
  std::string trace;       // Chrome/Perfetto trace JSON, written by rank 0
};

// Parses argv; on a bad flag prints the problem and the usage to stderr and exits with status 2; --help prints
// the usage and exits 0.
Options parseOptions(int argc, char** argv);

}  // namespace chorus::ddp::trainer
