// Every environment variable Chorus reads lives in one table (kEnvTable): name, type, default, description.
// Config::fromEnv() reads and validates them once per communicator init; chorus_info prints the table.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace chorus {

struct EnvSpec {
  const char* name;
  const char* type;  // "int", "bytes", "string", "enum"
  const char* defaultValue;
  const char* description;
};

std::span<const EnvSpec> envTable();

// The value in the environment, or the table's default when unset/empty.
std::string envValue(const char* name);

// Algorithms a collective may use, as bits; CHORUS_ALGO restricts them per collective and AUTO's cost model
// (algorithms/cost_model.h) picks among what is left. kAlgoOther: the small/mid-size allreduce algorithms
// (direct exchange, recursive and halving doubling), which only AUTO uses.
enum AlgoBits : unsigned { kAlgoRing = 1, kAlgoTree = 2, kAlgoOther = 4, kAlgoAll = 7 };
struct AlgoChoice {
  unsigned allReduce = kAlgoAll, broadcast = kAlgoAll, reduce = kAlgoAll, allGather = kAlgoAll,
           reduceScatter = kAlgoAll;
};
// Parses CHORUS_ALGO: "RING", "TREE", "AUTO", a comma list ("TREE,RING"), "^TREE" (all but), or per collective
// "allreduce:tree;broadcast:ring" (NCCL_ALGO's grammar), case-insensitive. Throws chorusInvalidArgument naming
// the unknown token, or a collective asked explicitly for an algorithm it does not have.
AlgoChoice parseAlgo(const std::string& text);

struct Config {
  AlgoChoice algo;
  int nsocks = 1;
  size_t chunkBytes = 0;  // 0: chosen at init by transport (Comm::chooseChunk)
  int spinUs = -1;  // -1: chosen at init from ranks per host and cores (Comm::chooseSpin)
  int yieldUs = 200;
  double timeoutSec = 600;
  double initTimeoutSec = 120;
  std::string socketIfname;
  std::string hostId;
  bool shmDisable = false;
  uint64_t shmDirectBytes = 0;

  // Throws chorusInvalidArgument naming the variable, its value and what is accepted.
  static Config fromEnv();
};

// Parses "64K", "1M", "2G" or a plain number; false when malformed.
bool parseBytes(const std::string& text, uint64_t* out);

}  // namespace chorus
