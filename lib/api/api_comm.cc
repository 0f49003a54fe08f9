// Exported functions: version, errors, communicator life cycle.
#include <unistd.h>

#include <algorithm>
#include <numeric>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>

#include "lib/api/api_guard.h"
#include "lib/api/dump_signal.h"
#include "lib/base/identity.h"
#include "lib/comm/bootstrap.h"
#include "lib/comm/comm.h"
#include "lib/api/group.h"
#include "lib/api/registry.h"

using namespace chorus;

namespace chorus {
void recordError(chorusComm_t comm, const char* text) {
  setThreadLastError(text);
  if (comm != nullptr && commAlive(comm)) comm->setLastError(text);
  CHORUS_INFO(kInit, "call failed: {}", text);
}
}  // namespace chorus

namespace {

chorusComm_t createComm(int nranks, int rank, const UniqueIdData& root, const Config& config) {
  installDumpSignal();
  auto* c = new chorusComm(nranks, rank, root, config);
  registerComm(c);
  return c;
}

// First set variable of a launcher's convention, or "" (with its name in *which).
std::string firstEnv(std::initializer_list<const char*> names, std::string* which) {
  for (const char* n : names) {
    const char* v = std::getenv(n);
    if (v != nullptr && *v != '\0') {
      *which = n;
      return v;
    }
  }
  return "";
}

int parseEnvInt(const std::string& name, const std::string& value) {
  char* end = nullptr;
  long v = std::strtol(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || v < 0 || v > (1 << 24))
    fail(chorusInvalidArgument, "environment variable {}='{}' is not a valid non-negative integer", name, value);
  return static_cast<int>(v);
}

// When a launcher says every rank is on this node and no root address was given, all ranks can agree on one
// without communicating: loopback and a port derived from the job's identity. "" when that is not the case.
std::string singleNodeRoot(int nranks) {
  auto env = [](const char* n) { const char* v = std::getenv(n); return std::string(v ? v : ""); };
  std::string job;
  if (env("OMPI_COMM_WORLD_LOCAL_SIZE") == std::to_string(nranks))
    job = "ompi:" + env("OMPI_MCA_ess_base_jobid") + env("PMIX_NAMESPACE");
  else if (env("MPI_LOCALNRANKS") == std::to_string(nranks) && !env("PMI_RANK").empty())
    job = "hydra:" + std::to_string(getppid());  // every rank of this node is a child of one hydra proxy
  else if (env("SLURM_NNODES") == "1" && !env("SLURM_JOB_ID").empty())
    job = "slurm:" + env("SLURM_JOB_ID") + "." + env("SLURM_STEP_ID");
  if (job.empty()) return "";
  uint64_t h = 1469598103934665603ull;  // FNV-1a: stable across processes, unlike std::hash
  for (unsigned char ch : job) h = (h ^ ch) * 1099511628211ull;
  std::string root = "127.0.0.1:" + std::to_string(20000 + h % 30000);
  CHORUS_INFO(kInit, "no CHORUS_ROOT/MASTER_ADDR: all {} ranks are on this node ({}), using {}", nranks, job, root);
  return root;
}

void checkNotInGroup(const char* fn) {
  if (groupDepth() > 0) fail(chorusInvalidUsage, "{} cannot be called between chorusGroupStart and chorusGroupEnd", fn);
}

}  // namespace

extern "C" {

chorusResult_t chorusGetVersion(int* version) {
  return apiCall(nullptr, [&] {
    if (version == nullptr) fail(chorusInvalidArgument, "version is NULL");
    *version = CHORUS_VERSION_CODE;
  });
}

const char* chorusGetErrorString(chorusResult_t result) {
  int r;  // any int may arrive from C: never load an out-of-range value through the enum type
  std::memcpy(&r, &result, sizeof r);
  switch (r) {
    case chorusSuccess: return "no error";
    case chorusUnhandledCudaError: return "unhandled CUDA error";
    case chorusSystemError: return "system error (a system call or allocation failed)";
    case chorusInternalError: return "internal error (a bug in Chorus)";
    case chorusInvalidArgument: return "invalid argument";
    case chorusInvalidUsage: return "invalid usage (call order, mismatched calls across ranks, or a dead handle)";
    case chorusRemoteError: return "remote error (a peer died, disconnected or failed)";
    case chorusInProgress: return "operation in progress";
    case chorusTimeout: return "timeout";
  }
  return "unknown result code";
}

const char* chorusGetLastError(chorusComm_t comm) {
  if (comm != nullptr && commAlive(comm)) return comm->lastError();
  return threadLastError();
}

chorusResult_t chorusGetUniqueId(chorusUniqueId* uniqueId) {
  return apiCall(nullptr, [&] {
    if (uniqueId == nullptr) fail(chorusInvalidArgument, "uniqueId is NULL");
    Config config = Config::fromEnv();
    SockAddr addr = findInterfaceAddress(config.socketIfname, nullptr);
    addr.setPort(0);
    UniqueIdData d;
    Fd listener = listenOn(addr, &d.root);
    d.secret = randomU64();
    startRoot(std::move(listener), d.secret, config.initTimeoutSec);
    encodeUniqueId(d, uniqueId);
  });
}

chorusResult_t chorusCommInitRank(chorusComm_t* comm, int nranks, chorusUniqueId commId, int rank) {
  return chorusCommInitRankConfig(comm, nranks, commId, rank, nullptr);
}

namespace {
// The environment's settings with what config sets over them.
Config withSettings(const chorusConfig_t* config) {
  Config c = Config::fromEnv();
  if (config == nullptr) return c;
  // The first layout ended before peerTimeoutSec.
  constexpr size_t kFirstLayout = offsetof(chorusConfig_t, peerTimeoutSec);
  if ((config->size != sizeof(chorusConfig_t) && config->size != kFirstLayout) || config->magic != CHORUS_CONFIG_MAGIC)
    fail(chorusInvalidArgument, "config (size {}, magic {:#x}) was not made from CHORUS_CONFIG_INITIALIZER of this "
         "chorus.h", config->size, config->magic);
  auto seconds = [](double v, const char* name, double* out) {
    if (!(v >= 0) || v > 1e9) fail(chorusInvalidArgument, "config->{}={} must be 0 (the environment's) or a number "
                                   "of seconds up to 1e9", name, v);
    if (v > 0) *out = v;
  };
  seconds(config->timeoutSec, "timeoutSec", &c.timeoutSec);
  seconds(config->initTimeoutSec, "initTimeoutSec", &c.initTimeoutSec);
  if (config->size > kFirstLayout) seconds(config->peerTimeoutSec, "peerTimeoutSec", &c.peerTimeoutSec);
  return c;
}

// What a split's exchange carries in place of a color when the rank refused its own arguments; no valid color is
// this negative (CHORUS_SPLIT_NOCOLOR is -1).
constexpr int32_t kRefusedColor = INT32_MIN;
}  // namespace

chorusResult_t chorusCommInitRankConfig(chorusComm_t* comm, int nranks, chorusUniqueId commId, int rank,
                                        const chorusConfig_t* config) {
  return apiCall(nullptr, [&] {
    if (comm == nullptr) fail(chorusInvalidArgument, "comm (the output pointer) is NULL");
    *comm = nullptr;
    checkNotInGroup("chorusCommInitRank");
    if (nranks < 1) fail(chorusInvalidArgument, "nranks={} must be at least 1", nranks);
    if (rank < 0 || rank >= nranks) fail(chorusInvalidArgument, "rank={} is outside [0, nranks={})", rank, nranks);
    Config settings = withSettings(config);
    UniqueIdData root = decodeUniqueId(commId);
    *comm = createComm(nranks, rank, root, settings);
  });
}

chorusResult_t chorusCommSplit(chorusComm_t comm, int color, int key, chorusComm_t* newcomm,
                               const chorusConfig_t* config) {
  return apiCall(comm, [&] {
    if (newcomm == nullptr) fail(chorusInvalidArgument, "newcomm (the output pointer) is NULL");
    *newcomm = nullptr;
    checkNotInGroup("chorusCommSplit");
    CallRef c(comm, "comm");
    // A bad color or config is this rank's error, yet it still takes its part in the exchange and tells the others
    // why: they fail at once naming it instead of waiting out the creation timeout, and every rank's count of split
    // rounds stays the same, so the next split meets (Note [Rendezvous]).
    std::optional<Error> refused;
    Config settings = c->config();
    try {
      if (color < 0 && color != CHORUS_SPLIT_NOCOLOR)
        fail(chorusInvalidArgument, "color={} must be at least 0, or CHORUS_SPLIT_NOCOLOR ({})", color,
             CHORUS_SPLIT_NOCOLOR);
      if (config != nullptr) settings = withSettings(config);
    } catch (const Error& e) {
      refused = e;
    }
    // Every rank's color and key through a root on rank 0's rendezvous listener, not through comm: comm may have
    // failed (Note [Rendezvous]).
    const int n = c->nranks(), me = c->rank();
    Rendezvous& rv = c->rendezvous();
    struct RootEnd {
      Rendezvous& rv;
      ~RootEnd() { rv.endRoot(); }
    } rootEnd{rv};
    rv.beginRound("split", {});
    RankInfo mine;
    mine.rank = me;
    mine.nranks = n;
    mine.pid = getpid();
    const int32_t colorKey[2] = {refused ? kRefusedColor : color, key};
    mine.payload.assign(reinterpret_cast<const uint8_t*>(colorKey), reinterpret_cast<const uint8_t*>(colorKey + 2));
    if (refused) {
      std::string why = std::string(refused->what()).substr(0, kMaxRendezvousPayload - sizeof colorKey);
      mine.payload.insert(mine.payload.end(), why.begin(), why.end());
    }
    std::vector<int> everyone(static_cast<size_t>(n));
    std::iota(everyone.begin(), everyone.end(), 0);
    BootstrapResult all = exchangeWithRoot(rv.root(0, -1, settings.initTimeoutSec, c->goneAmong(everyone)), mine,
                                           deadlineIn(settings.initTimeoutSec));
    if (refused) throw *refused;
    std::vector<int> members;  // ranks in comm of this rank's new communicator, in its order
    std::vector<int32_t> keys(static_cast<size_t>(n));
    for (const RankInfo& r : all.ranks) {
      int32_t ck[2] = {0, 0};
      const bool whole = r.payload.size() >= sizeof ck;
      if (whole) std::memcpy(ck, r.payload.data(), sizeof ck);
      if (whole && ck[0] == kRefusedColor)
        fail(chorusRemoteError, "rank {} refused its arguments to chorusCommSplit ({}), so no communicator was "
             "formed", r.rank, std::string(r.payload.begin() + sizeof ck, r.payload.end()));
      if (r.payload.size() != sizeof ck) fail(chorusRemoteError, "rank {} sent a malformed color and key", r.rank);
      keys[static_cast<size_t>(r.rank)] = ck[1];
      if (color != CHORUS_SPLIT_NOCOLOR && ck[0] == color) members.push_back(r.rank);
    }
    if (members.empty()) return;
    std::stable_sort(members.begin(), members.end(), [&](int a, int b) { return keys[a] < keys[b]; });
    const int newRank = static_cast<int>(std::find(members.begin(), members.end(), me) - members.begin());
    *newcomm = createComm(static_cast<int>(members.size()), newRank,
                          rv.root(members[0], color, settings.initTimeoutSec, c->goneAmong(members)), settings);
  });
}

chorusResult_t chorusCommShrink(chorusComm_t comm, int* excludeRanksList, int excludeRanksCount,
                                chorusComm_t* newcomm, const chorusConfig_t* config, int shrinkFlags) {
  return apiCall(comm, [&] {
    if (newcomm == nullptr) fail(chorusInvalidArgument, "newcomm (the output pointer) is NULL");
    *newcomm = nullptr;
    checkNotInGroup("chorusCommShrink");
    CallRef c(comm, "comm");
    if (shrinkFlags != CHORUS_SHRINK_DEFAULT && shrinkFlags != CHORUS_SHRINK_ABORT)
      fail(chorusInvalidArgument, "shrinkFlags={} must be CHORUS_SHRINK_DEFAULT (0) or CHORUS_SHRINK_ABORT (1)",
           shrinkFlags);
    const int n = c->nranks(), me = c->rank();
    if (excludeRanksCount < 0 || excludeRanksCount >= n)
      fail(chorusInvalidArgument, "excludeRanksCount={} must be in [0, nranks={}): at least this rank stays",
           excludeRanksCount, n);
    if (excludeRanksCount > 0 && excludeRanksList == nullptr)
      fail(chorusInvalidArgument, "excludeRanksList is NULL with excludeRanksCount={}", excludeRanksCount);
    std::vector<bool> out(static_cast<size_t>(n), false);
    for (int i = 0; i < excludeRanksCount; ++i) {
      const int r = excludeRanksList[i];
      if (r < 0 || r >= n) fail(chorusInvalidArgument, "excludeRanksList[{}]={} is outside [0, nranks={})", i, r, n);
      if (out[static_cast<size_t>(r)]) fail(chorusInvalidArgument, "excludeRanksList lists rank {} twice", r);
      if (r == me)
        fail(chorusInvalidArgument, "excludeRanksList[{}]={} is the calling rank: excluded ranks do not call "
             "chorusCommShrink", i, r);
      out[static_cast<size_t>(r)] = true;
    }
    const Config settings = config != nullptr ? withSettings(config) : c->config();
    if (shrinkFlags == CHORUS_SHRINK_ABORT)
      c->failFromOutside(chorusInvalidUsage, "its operations were ended by chorusCommShrink(CHORUS_SHRINK_ABORT)");
    std::vector<int32_t> excluded;
    std::vector<int> survivors;
    for (int r = 0; r < n; ++r) (out[static_cast<size_t>(r)] ? excluded.push_back(r) : survivors.push_back(r));
    // The survivors meet at the lowest survivor's rendezvous listener (Note [Rendezvous]); the excluded ranks are
    // part of the round's secret, so survivors that disagree about them do not form a communicator together.
    Rendezvous& rv = c->rendezvous();
    struct RootEnd {
      Rendezvous& rv;
      ~RootEnd() { rv.endRoot(); }
    } rootEnd{rv};
    rv.beginRound("shrink", excluded);
    const int newRank = static_cast<int>(std::find(survivors.begin(), survivors.end(), me) - survivors.begin());
    *newcomm = createComm(static_cast<int>(survivors.size()), newRank,
                          rv.root(survivors[0], 0, settings.initTimeoutSec, c->goneAmong(survivors)), settings);
  });
}

chorusResult_t chorusCommInitFromEnv(chorusComm_t* comm) {
  return apiCall(nullptr, [&] {
    if (comm == nullptr) fail(chorusInvalidArgument, "comm (the output pointer) is NULL");
    *comm = nullptr;
    checkNotInGroup("chorusCommInitFromEnv");
    Config config = Config::fromEnv();
    std::string rankVar, sizeVar;
    std::string rankText = firstEnv({"CHORUS_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}, &rankVar);
    std::string sizeText =
        firstEnv({"CHORUS_NRANKS", "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"}, &sizeVar);
    if (rankText.empty() || sizeText.empty())
      fail(chorusInvalidUsage,
           "chorusCommInitFromEnv found no {} in the environment: launch with chorusrun, torchrun, mpirun or srun, "
           "or set CHORUS_RANK and CHORUS_NRANKS", rankText.empty() ? "rank" : "world size");
    int rank = parseEnvInt(rankVar, rankText), nranks = parseEnvInt(sizeVar, sizeText);
    if (nranks < 1) fail(chorusInvalidArgument, "{}={} must be at least 1", sizeVar, nranks);
    if (rank >= nranks) fail(chorusInvalidArgument, "{}={} is outside [0, {}={})", rankVar, rank, sizeVar, nranks);
    std::string rootText = envValue("CHORUS_ROOT");
    if (rootText.empty()) {
      const char* a = std::getenv("MASTER_ADDR");
      const char* p = std::getenv("MASTER_PORT");
      if (a != nullptr && p != nullptr) rootText = std::string(a) + ":" + p;
      else rootText = singleNodeRoot(nranks);
      if (rootText.empty())
        fail(chorusInvalidUsage, "chorusCommInitFromEnv needs the root address: set CHORUS_ROOT=host:port, or "
                                 "MASTER_ADDR and MASTER_PORT (needed unless all ranks run on one node)");
    }
    UniqueIdData root;
    root.root = SockAddr::parse(rootText);
    std::string secretText = envValue("CHORUS_SECRET");
    if (!secretText.empty()) {
      char* end = nullptr;
      root.secret = std::strtoull(secretText.c_str(), &end, 16);
      if (*end != '\0') fail(chorusInvalidArgument, "CHORUS_SECRET='{}' is not a hexadecimal number", secretText);
    } else {
      static std::once_flag said;
      std::call_once(said, [] {
        CHORUS_INFO(kInit, "CHORUS_SECRET is not set: this job uses the default secret, which everyone knows, so "
                    "anyone who can reach its ports can join it (Note [Authentication]); set CHORUS_SECRET to the "
                    "same random hexadecimal number on every rank (chorusrun does)");
      });
    }
    if (rank == 0) {
      SockAddr bindAddr = root.root;
      Fd listener;
      try {
        listener = listenOn(bindAddr, nullptr);
      } catch (const Error& e) {
        if (e.sysErrno() == EADDRINUSE)
          fail(chorusSystemError, "rank 0 cannot listen at the root address {}: {}; choose a free one with CHORUS_ROOT",
               rootText, e.what());
        // Otherwise the name may resolve to an address of another interface: listen on all of them.
        SockAddr any;
        any.ss.ss_family = root.root.ss.ss_family;
        any.len = root.root.len;
        any.setPort(root.root.port());
        listener = listenOn(any, nullptr);
      }
      startRoot(std::move(listener), root.secret, config.initTimeoutSec);
    }
    *comm = createComm(nranks, rank, root, config);
  });
}

chorusResult_t chorusCommDestroy(chorusComm_t comm) {
  return apiCall(nullptr, [&] {
    if (comm == nullptr) fail(chorusInvalidArgument, "comm is NULL");
    checkNotInGroup("chorusCommDestroy");
    if (!commAlive(comm))
      fail(chorusInvalidUsage, "comm ({}) is not a live communicator: it was already destroyed or aborted",
           static_cast<void*>(comm));
    retireComm(comm);
    comm->shutdown();
    delete comm;
  });
}

chorusResult_t chorusCommAbort(chorusComm_t comm) {
  return apiCall(nullptr, [&] {
    if (comm == nullptr) fail(chorusInvalidArgument, "comm is NULL");
    if (!commAlive(comm))
      fail(chorusInvalidUsage, "comm ({}) is not a live communicator: it was already destroyed or aborted",
           static_cast<void*>(comm));
    comm->abort();
    retireComm(comm);
    comm->shutdown();
    delete comm;
  });
}

chorusResult_t chorusCommGetAsyncError(chorusComm_t comm, chorusResult_t* asyncError) {
  return apiCall(comm, [&] {
    CallRef c(comm, "comm");
    if (asyncError == nullptr) fail(chorusInvalidArgument, "asyncError is NULL");
    *asyncError = c->asyncError();
  });
}

chorusResult_t chorusCommDump(chorusComm_t comm, char* buf, size_t* size) {
  return apiCall(comm, [&] {
    CallRef c(comm, "comm");
    if (size == nullptr) fail(chorusInvalidArgument, "size is NULL");
    const std::string line = c->flightDump("chorusCommDump");
    const size_t need = line.size() + 1;
    if (buf == nullptr) {
      *size = need;
      return;
    }
    if (*size < need) {
      const size_t had = *size;
      *size = need;
      fail(chorusInvalidArgument, "size={} is too small for the dump: it needs {} bytes (*size now says so)", had,
           need);
    }
    std::memcpy(buf, line.c_str(), need);
    *size = need;
  });
}

chorusResult_t chorusCommCount(const chorusComm_t comm, int* count) {
  return apiCall(comm, [&] {
    CallRef c(comm, "comm");
    if (count == nullptr) fail(chorusInvalidArgument, "count is NULL");
    *count = c->nranks();
  });
}

chorusResult_t chorusCommUserRank(const chorusComm_t comm, int* rank) {
  return apiCall(comm, [&] {
    CallRef c(comm, "comm");
    if (rank == nullptr) fail(chorusInvalidArgument, "rank is NULL");
    *rank = c->rank();
  });
}

chorusResult_t chorusCommGetBytesSent(const chorusComm_t comm, unsigned long long* bytes) {
  return apiCall(comm, [&] {
    CallRef c(comm, "comm");
    if (bytes == nullptr) fail(chorusInvalidArgument, "bytes is NULL");
    *bytes = c->bytesSent();
  });
}

}  // extern "C"
