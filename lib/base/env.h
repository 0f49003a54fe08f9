// Every environment variable Chorus reads lives in one table: the core section here (name, type, default,
// description), and one section per transport, which each transport brings with it (transports/registry.h).
// Config::fromEnv() reads and validates the core section once per communicator init; a transport reads its own
// section when it is created; chorus_info prints every section.
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

// The core section.
std::span<const EnvSpec> envTable();

// The value in the environment, or the default that `section` gives `name` when it is unset or empty.
std::string envValue(const char* name, std::span<const EnvSpec> section = envTable());
// An integer in [lo, hi]; throws chorusInvalidArgument naming the variable, its value and the range.
int64_t envInt(const char* name, int64_t lo, int64_t hi, std::span<const EnvSpec> section = envTable());
// A size ("64K", "1M" or a plain number); throws chorusInvalidArgument naming the variable and `accepted`.
uint64_t envBytes(const char* name, const char* accepted, std::span<const EnvSpec> section = envTable());

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
  size_t chunkBytes = 0;  // CHORUS_CHUNK_BYTES; 0: chosen at init from the transports' traits (Comm::chooseChunk)
  int spinUs = -1;  // -1: chosen at init from ranks per host and cores (Comm::chooseSpin)
  int yieldUs = 200;
  int deferUs = 1000;  // CHORUS_DEFER_US (Note [Deferred wake] in lib/comm/executor.cc); 0: never deferred
  double timeoutSec = 600;
  double initTimeoutSec = 120;
  double peerTimeoutSec = 30;  // CHORUS_PEER_TIMEOUT (Note [Liveness] in lib/comm/liveness.h); 0: off
  size_t flightRecords = 256;  // CHORUS_FLIGHT_RECORDER (Note [Flight recorder] in lib/comm/flight_recorder.h); 0: off
  std::string socketIfname;
  std::string hostId;
  std::string transports;  // CHORUS_TRANSPORTS, parsed by transports/registry.h
  bool deviceIpc = true;        // CHORUS_DEVICE_IPC (Note [Device routes] in lib/comm/comm.cc)
  bool deviceIpcReduce = true;  // CHORUS_DEVICE_IPC_REDUCE

  // Throws chorusInvalidArgument naming the variable, its value and what is accepted.
  static Config fromEnv();
};

// Parses "64K", "1M", "2G" or a plain number; false when malformed.
bool parseBytes(const std::string& text, uint64_t* out);

}  // namespace chorus
