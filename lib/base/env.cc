#include "lib/base/env.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "lib/base/error.h"
#include "lib/base/ops.h"
#include "lib/base/text.h"

namespace chorus {

namespace {

constexpr EnvSpec kEnvTable[] = {
    {"CHORUS_DEBUG", "enum", "WARN", "log level: WARN, INFO, DEBUG or TRACE"},
    {"CHORUS_DEBUG_SUBSYS", "string", "ALL",
     "comma list of INIT,BOOTSTRAP,NET,COLL,ENV,P2P,ALL; a leading ^ logs all but those"},
    {"CHORUS_DEBUG_FILE", "string", "", "log to this file instead of stderr; %h = host, %p = pid"},
    {"CHORUS_ALGO", "string", "AUTO",
     "algorithms allowed: RING, TREE, AUTO (cost model), a comma list, ^ excludes, or per collective as "
     "allreduce:tree;broadcast:ring (NCCL_ALGO's grammar)"},
    {"CHORUS_CHUNK_BYTES", "bytes", "", "pipeline chunk of the ring and chain algorithms (4K..64M); default: at each "
     "size the smallest that a transport in use asks for (shm 1M, 64K from 32M on a host with more ranks than "
     "cores, tcp 127.5K, ucx 1M, over UCX's shared memory 128K "
     "from 16M on a host; measured), at most 96K across hosts"},
    {"CHORUS_SPIN_US", "int", "", "microseconds a waiting rank polls before it sleeps in epoll (0..100000); "
     "default 50, or 0 when this host runs more ranks than it has cores (a spinning rank would take the time slice of "
     "the rank it waits for)"},
    {"CHORUS_YIELD_US", "int", "200",
     "microseconds a waiting rank then polls between sched_yield calls, which let a peer sharing its core run, before "
     "it sleeps (0..100000)"},
    {"CHORUS_DEFER_US", "int", "1000",
     "microseconds an operation queued on a host stream may wait for the thread that synchronizes it to run it "
     "itself before the communicator's worker starts it, up to 16 times that after a run of operations that were all "
     "synchronized promptly (0..10000000; 0: the worker is woken at once)"},
    {"CHORUS_TIMEOUT", "int", "600", "seconds an operation may make no progress before chorusTimeout (1..)"},
    {"CHORUS_INIT_TIMEOUT", "int", "120", "seconds communicator creation may take before chorusTimeout (1..)"},
    {"CHORUS_PEER_TIMEOUT", "int", "30",
     "seconds without a heartbeat from a peer before it is declared silent and the communicator fails naming it "
     "(1..; 0: no heartbeats, e.g. where UDP between hosts is blocked); heartbeats come from a thread of the "
     "library's own, so a rank busy computing is never declared"},
    {"CHORUS_FLIGHT_RECORDER", "int", "256",
     "operations each communicator remembers (0..1000000; 0: none), dumped as one JSON line per rank on a timeout, "
     "on a failure, on CHORUS_DUMP_SIGNAL and by chorusCommDump; scripts/chorus_hang.py merges the dumps"},
    {"CHORUS_DUMP_SIGNAL", "string", "",
     "USR1, USR2 or a signal number: on that signal every communicator of the process dumps its flight recorder "
     "(installed only where the application has no handler of its own)"},
    {"CHORUS_SOCKET_IFNAME", "string", "",
     "interfaces to use: prefix list, ^ excludes, = exact (NCCL_SOCKET_IFNAME syntax); default first up non-lo"},
    {"CHORUS_HOSTID", "string", "", "overrides the host identity (hostname + boot id) used to group ranks"},
    {"CHORUS_TRANSPORTS", "string", "",
     "transports that may serve pairs, in order of preference: a comma list (shm,ucx), ^ for all but those "
     "(^shm), case-insensitive; default the built-in ones, shm then tcp; plugins load only when named or with ^"},
    {"CHORUS_DEVICE_IPC", "int", "1",
     "1: ranks of one host move device memory device to device (CUDA IPC); 0: through pinned host memory and the "
     "host transports"},
    {"CHORUS_DEVICE_IPC_REDUCE", "int", "1",
     "1: a reducing step over device IPC runs the reduce kernel reading the peer's buffer; 0: the copy engine "
     "copies it to scratch first"},
    {"CHORUS_CUDA_STREAM_WAIT", "enum", "memop",
     "how a CUDA stream waits for a Chorus operation queued on it (read by the CUDA memory plugin): memop, the "
     "driver's cuStreamWaitValue32 (a host function where the driver lacks it), or hostfn, a host function"},
    {"CHORUS_PLUGIN_PATH", "string", "",
     "colon list of folders searched first for transport plugins (libchorus-NAME.so), then the folder of "
     "libchorus.so and its chorus/ sub-folder"},
    {"CHORUS_ROOT", "string", "", "host:port of rank 0's bootstrap listener (chorusCommInitFromEnv)"},
    {"CHORUS_SECRET", "string", "", "64-bit hex secret every connection proves it knows, never sending it "
     "(chorusCommInitFromEnv); unset: the default secret, which everyone knows"},
    {"CHORUS_RANK", "int", "", "this process's rank (else RANK, OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID)"},
    {"CHORUS_NRANKS", "int", "",
     "number of ranks (else WORLD_SIZE, OMPI_COMM_WORLD_SIZE, PMI_SIZE, SLURM_NTASKS)"},
    {"CHORUS_LOCAL_RANK", "int", "", "rank within this host, set by chorusrun (informational)"},
    {"CHORUS_RESTART", "int", "", "which run of the job this is, set by chorusrun: 0, then 1.. after each restart "
     "(--max-restarts; informational)"},
};

[[noreturn]] void badValue(const char* name, const std::string& value, const char* accepted) {
  fail(chorusInvalidArgument, "environment variable {}='{}' is invalid: expected {}", name, value, accepted);
}

}  // namespace

int64_t envInt(const char* name, int64_t lo, int64_t hi, std::span<const EnvSpec> section) {
  std::string v = envValue(name, section);
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno != 0 || x < lo || x > hi)
    badValue(name, v, fmt::format("an integer in [{}, {}]", lo, hi).c_str());
  return x;
}

namespace {

std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::toupper(c); });
  return s;
}

}  // namespace

std::span<const EnvSpec> envTable() { return kEnvTable; }

std::string envValue(const char* name, std::span<const EnvSpec> section) {
  const char* v = std::getenv(name);
  if (v != nullptr && *v != '\0') return v;
  for (const EnvSpec& s : section)
    if (std::strcmp(s.name, name) == 0) return s.defaultValue;
  return "";
}

uint64_t envBytes(const char* name, const char* accepted, std::span<const EnvSpec> section) {
  std::string v = envValue(name, section);
  uint64_t x = 0;
  if (!parseBytes(v, &x)) badValue(name, v, accepted);
  return x;
}

bool parseBytes(const std::string& text, uint64_t* out) {
  if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0]))) return false;
  char* end = nullptr;
  errno = 0;
  unsigned long long x = std::strtoull(text.c_str(), &end, 10);
  if (errno != 0) return false;
  int shift = 0;
  std::string suffix = upper(end);
  if (suffix == "K" || suffix == "KB" || suffix == "KIB") shift = 10;
  else if (suffix == "M" || suffix == "MB" || suffix == "MIB") shift = 20;
  else if (suffix == "G" || suffix == "GB" || suffix == "GIB") shift = 30;
  else if (!suffix.empty() && suffix != "B") return false;
  if (shift != 0 && x > (~0ULL >> shift)) return false;
  *out = x << shift;
  return true;
}

namespace {

// "ring,tree", "^tree" or "auto" -> bits.
unsigned algoBits(const std::string& text, const std::string& whole) {
  std::string list = text;
  bool exclude = !list.empty() && list[0] == '^';
  if (exclude) list = list.substr(1);
  unsigned bits = 0;
  for (const std::string& name : split(list, ',')) {
    std::string u = upper(name);
    if (u == "RING") bits |= kAlgoRing;
    else if (u == "TREE") bits |= kAlgoTree;
    else if (u == "AUTO" && !exclude) bits |= kAlgoAll;
    else
      fail(chorusInvalidArgument, "environment variable CHORUS_ALGO='{}' is invalid: unknown algorithm '{}' "
           "(expected RING, TREE or AUTO, a comma list of them, ^ to exclude, or collective:algorithm;...)",
           whole, name);
  }
  return exclude ? kAlgoAll & ~bits : bits;
}

}  // namespace

AlgoChoice parseAlgo(const std::string& text) {
  struct Coll { const char* name; unsigned AlgoChoice::*field; unsigned has; };
  // What each collective has: only AllReduce has a tree (and the AUTO-only algorithms).
  const Coll colls[] = {{"ALLREDUCE", &AlgoChoice::allReduce, kAlgoAll},
                        {"BROADCAST", &AlgoChoice::broadcast, kAlgoRing},
                        {"REDUCE", &AlgoChoice::reduce, kAlgoRing},
                        {"ALLGATHER", &AlgoChoice::allGather, kAlgoRing},
                        {"REDUCESCATTER", &AlgoChoice::reduceScatter, kAlgoRing}};
  AlgoChoice choice;
  for (const std::string& entry : split(text, ';')) {
    if (entry.empty()) continue;
    size_t colon = entry.find(':');
    if (colon == std::string::npos) {  // every collective; those without the algorithm keep theirs
      unsigned bits = algoBits(entry, text);
      for (const Coll& c : colls) choice.*c.field = (bits & c.has) != 0 ? bits & c.has : c.has;
      continue;
    }
    std::string name = upper(trim(entry.substr(0, colon)));
    const Coll* coll = nullptr;
    for (const Coll& c : colls)
      if (name == c.name) coll = &c;
    if (coll == nullptr)
      fail(chorusInvalidArgument, "environment variable CHORUS_ALGO='{}' is invalid: unknown collective '{}' "
           "(expected allreduce, broadcast, reduce, allgather or reducescatter)", text, trim(entry.substr(0, colon)));
    unsigned bits = algoBits(trim(entry.substr(colon + 1)), text);
    if ((bits & coll->has) == 0)
      fail(chorusInvalidArgument, "environment variable CHORUS_ALGO='{}' is invalid: {} has no {} algorithm "
           "(it has ring only)", text, trim(entry.substr(0, colon)), trim(entry.substr(colon + 1)));
    choice.*coll->field = bits & coll->has;
  }
  return choice;
}

Config Config::fromEnv() {
  Config c;
  c.algo = parseAlgo(envValue("CHORUS_ALGO"));
  std::string chunkText = envValue("CHORUS_CHUNK_BYTES");
  if (!chunkText.empty()) {
    uint64_t chunk = 0;
    if (!parseBytes(chunkText, &chunk) || chunk < kMinChunkBytes || chunk > kMaxChunkBytes)
      badValue("CHORUS_CHUNK_BYTES", chunkText, "a size in [4K, 64M] such as 512K");
    c.chunkBytes = chunk;
  }
  c.yieldUs = static_cast<int>(envInt("CHORUS_YIELD_US", 0, 100000));
  c.deferUs = static_cast<int>(envInt("CHORUS_DEFER_US", 0, 10000000));
  if (!envValue("CHORUS_SPIN_US").empty()) c.spinUs = static_cast<int>(envInt("CHORUS_SPIN_US", 0, 100000));
  c.timeoutSec = static_cast<double>(envInt("CHORUS_TIMEOUT", 1, 1LL << 31));
  c.initTimeoutSec = static_cast<double>(envInt("CHORUS_INIT_TIMEOUT", 1, 1LL << 31));
  c.peerTimeoutSec = static_cast<double>(envInt("CHORUS_PEER_TIMEOUT", 0, 1LL << 31));
  c.flightRecords = static_cast<size_t>(envInt("CHORUS_FLIGHT_RECORDER", 0, 1000000));
  c.socketIfname = envValue("CHORUS_SOCKET_IFNAME");
  c.hostId = envValue("CHORUS_HOSTID");
  c.transports = envValue("CHORUS_TRANSPORTS");
  c.deviceIpc = envInt("CHORUS_DEVICE_IPC", 0, 1) == 1;
  c.deviceIpcReduce = envInt("CHORUS_DEVICE_IPC_REDUCE", 0, 1) == 1;
  return c;
}

}  // namespace chorus
