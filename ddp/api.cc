// The DDP C API (include/chorus/ddp.h): argument checks that name the argument and the rank, then the Reducer.
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "chorus/ddp.h"
#include "ddp/reducer.h"
#include "lib/api/api_guard.h"
#include "lib/base/immortal.h"
#include "lib/kernels/reduce.h"

using namespace chorus;

struct chorusDdp {
  std::unique_ptr<ddp::Reducer> reducer;
  std::mutex mu;  // one call at a time per handle (a framework may report gradients from several threads)
};

namespace {

std::mutex gMu;
Immortal<std::set<chorusDdp_t>> gLive;  // handles not yet destroyed (Note [Immortal statics])

bool floatingType(int v) {
  return v == chorusFloat16 || v == chorusBfloat16 || v == chorusFloat32 || v == chorusFloat64;
}

// Reads a tensor list from C arrays; returns "" or the first problem, naming the argument.
std::string readTensors(int n, void* const* data, const size_t* counts, const chorusDataType_t* types,
                        const char* dataName, std::vector<ddp::Tensor>* out) {
  if (n > 0 && data == nullptr) return fmt::format("{} is NULL with n{}={}", dataName, dataName, n);
  if (n > 0 && counts == nullptr) return fmt::format("counts is NULL with {} {}", n, dataName);
  if (n > 0 && types == nullptr) return fmt::format("datatypes is NULL with {} {}", n, dataName);
  for (int i = 0; i < n; ++i) {
    const int t = rawEnum(types[i]);
    if (!floatingType(t))
      return fmt::format("datatypes[{}]={} is not a floating-point chorusDataType_t (float16, bfloat16, float32, "
                         "float64): gradients are averaged", i, t);
    if (data[i] == nullptr && counts[i] > 0) return fmt::format("{}[{}] is NULL with counts[{}]={}", dataName, i, i, counts[i]);
    out->push_back({data[i], counts[i], static_cast<chorusDataType_t>(t)});
  }
  return "";
}

std::string readConfig(const chorusDdpConfig* c, ddp::Options* o) {
  if (c == nullptr) return "";
  if (c->size != sizeof(chorusDdpConfig))
    return fmt::format("config->size={} but this library's chorusDdpConfig has {} bytes (set it with "
                       "CHORUS_DDP_CONFIG_INITIALIZER; header and library differ?)", c->size, sizeof(chorusDdpConfig));
  auto mib = [](double v, const char* name, size_t* bytes) -> std::string {
    if (!std::isfinite(v) || v <= 0 || v > 1e6) return fmt::format("config->{}={} must be in (0, 1e6] MiB", name, v);
    *bytes = std::max<size_t>(1, static_cast<size_t>(v * 1024 * 1024));
    return "";
  };
  std::string e = mib(c->bucketCapMb, "bucketCapMb", &o->capBytes);
  if (e.empty()) e = mib(c->firstBucketMb, "firstBucketMb", &o->firstCapBytes);
  if (!e.empty()) return e;
  if (c->compression != -1 && c->compression != chorusFloat16 && c->compression != chorusBfloat16)
    return fmt::format("config->compression={} must be -1 (none), chorusFloat16 ({}) or chorusBfloat16 ({})",
                       c->compression, static_cast<int>(chorusFloat16), static_cast<int>(chorusBfloat16));
  o->findUnused = c->findUnusedParameters != 0;
  o->asView = c->gradientAsBucketView != 0;
  o->broadcastBuffers = c->broadcastBuffers != 0;
  o->compression = c->compression;
  return "";
}

// This rank in comm; throws when comm is not a live communicator (the C API's own check and text).
int liveRank(chorusComm_t comm, const char* what) {
  int rank = -1;
  if (chorusResult_t rc = chorusCommUserRank(comm, &rank); rc != chorusSuccess)
    throw Error(rc, fmt::format("{}: {}", what, chorusGetLastError(nullptr)));
  return rank;
}

// Runs body with the handle's reducer, holding its communicator; errors land on that communicator.
template <typename F>
chorusResult_t withDdp(chorusDdp_t d, const char* fn, F&& body) {
  {
    std::lock_guard<std::mutex> g(gMu);
    if (d == nullptr || gLive->count(d) == 0)
      return apiCall(nullptr, [&] {
        fail(chorusInvalidArgument, "{}: ddp ({}) is {}", fn, static_cast<void*>(d),
             d == nullptr ? "NULL" : "not a live chorusDdp_t: destroyed or never created");
      });
  }
  ddp::Reducer& r = *d->reducer;
  return apiCall(r.comm(), [&] {
    std::lock_guard<std::mutex> serial(d->mu);
    liveRank(r.comm(), "the communicator of ddp");
    body(r);
  });
}

void paramIndex(const ddp::Reducer& r, const char* fn, int param) {
  if (param < 0 || param >= r.nparams())
    fail(chorusInvalidArgument, "{} on rank {}: param={} is outside [0, nparams={})", fn, r.rank(), param,
         r.nparams());
}

}  // namespace

extern "C" {

chorusResult_t chorusDdpCreate(chorusComm_t comm, int nparams, void* const* params, void* const* grads,
                               const size_t* counts, const chorusDataType_t* datatypes,
                               const chorusDdpConfig* config, chorusDdp_t* out) {
  return apiCall(comm, [&] {
    const int rank = liveRank(comm, "comm");
    if (out == nullptr) fail(chorusInvalidArgument, "chorusDdpCreate on rank {}: ddp is NULL", rank);
    *out = nullptr;
    ddp::Options opt;
    std::vector<ddp::Tensor> list;
    std::string problem = readConfig(config, &opt);
    if (problem.empty() && nparams <= 0)
      problem = fmt::format("nparams={}: there is nothing to synchronise (DDP needs at least one parameter)", nparams);
    if (problem.empty()) problem = readTensors(nparams, params, counts, datatypes, "params", &list);
    std::vector<void*> g;
    if (problem.empty() && grads == nullptr && !opt.asView)
      problem = "grads is NULL without config->gradientAsBucketView";
    if (problem.empty() && grads != nullptr)
      for (int i = 0; i < nparams && problem.empty(); ++i) {
        if (grads[i] == nullptr && counts[i] > 0 && !opt.asView)
          problem = fmt::format("grads[{}] is NULL with counts[{}]={}", i, i, counts[i]);
        g.push_back(grads[i]);
      }
    auto handle = std::make_unique<chorusDdp>();
    handle->reducer = std::make_unique<ddp::Reducer>(comm, std::move(list), std::move(g), opt, problem);
    std::lock_guard<std::mutex> lock(gMu);
    gLive->insert(handle.get());
    *out = handle.release();
  });
}

chorusResult_t chorusDdpRegisterBuffers(chorusDdp_t d, int nbuffers, void* const* buffers, const size_t* counts,
                                        const chorusDataType_t* datatypes) {
  return withDdp(d, "chorusDdpRegisterBuffers", [&](ddp::Reducer& r) {
    std::vector<ddp::Tensor> list;
    std::string problem;
    if (nbuffers < 0) problem = fmt::format("nbuffers={} is negative", nbuffers);
    else if (r.stepped()) problem = "buffers must be registered before the first chorusDdpPreForward";
    if (problem.empty()) problem = readTensors(nbuffers, buffers, counts, datatypes, "buffers", &list);
    r.registerBuffers(std::move(list), problem);
  });
}

chorusResult_t chorusDdpPreForward(chorusDdp_t d) {
  return withDdp(d, "chorusDdpPreForward", [&](ddp::Reducer& r) { r.preForward(); });
}

chorusResult_t chorusDdpPrepareForBackward(chorusDdp_t d, const int* used) {
  return withDdp(d, "chorusDdpPrepareForBackward", [&](ddp::Reducer& r) { r.prepareForBackward(used); });
}

chorusResult_t chorusDdpMarkGradReady(chorusDdp_t d, int param) {
  return withDdp(d, "chorusDdpMarkGradReady", [&](ddp::Reducer& r) {
    paramIndex(r, "chorusDdpMarkGradReady", param);
    r.markReady(param);
  });
}

chorusResult_t chorusDdpFinalizeBackward(chorusDdp_t d) {
  return withDdp(d, "chorusDdpFinalizeBackward", [&](ddp::Reducer& r) { r.finalizeBackward(); });
}

chorusResult_t chorusDdpSetGradSync(chorusDdp_t d, int enabled) {
  return withDdp(d, "chorusDdpSetGradSync", [&](ddp::Reducer& r) { r.setGradSync(enabled != 0); });
}

chorusResult_t chorusDdpGradPointer(chorusDdp_t d, int param, void** grad) {
  return withDdp(d, "chorusDdpGradPointer", [&](ddp::Reducer& r) {
    paramIndex(r, "chorusDdpGradPointer", param);
    if (grad == nullptr) fail(chorusInvalidArgument, "chorusDdpGradPointer: grad is NULL");
    *grad = r.gradPointer(param);
  });
}

chorusResult_t chorusDdpJoin(chorusDdp_t d) {
  return withDdp(d, "chorusDdpJoin", [&](ddp::Reducer& r) { r.join(); });
}

chorusResult_t chorusDdpRegisterCommHook(chorusDdp_t d, chorusDdpCommHook hook, void* state) {
  return withDdp(d, "chorusDdpRegisterCommHook", [&](ddp::Reducer& r) { r.setCommHook(hook, state); });
}

chorusResult_t chorusDdpBucketCount(chorusDdp_t d, int* nbuckets) {
  return withDdp(d, "chorusDdpBucketCount", [&](ddp::Reducer& r) {
    if (nbuckets == nullptr) fail(chorusInvalidArgument, "chorusDdpBucketCount: nbuckets is NULL");
    *nbuckets = static_cast<int>(r.buckets().size());
  });
}

chorusResult_t chorusDdpBucketInfo(chorusDdp_t d, int bucket, int* nparams, int* params, size_t* bytes) {
  return withDdp(d, "chorusDdpBucketInfo", [&](ddp::Reducer& r) {
    const int nb = static_cast<int>(r.buckets().size());
    if (bucket < 0 || bucket >= nb)
      fail(chorusInvalidArgument, "chorusDdpBucketInfo: bucket={} is outside [0, nbuckets={})", bucket, nb);
    if (nparams == nullptr) fail(chorusInvalidArgument, "chorusDdpBucketInfo: nparams is NULL");
    const ddp::BucketLayout& l = r.buckets()[static_cast<size_t>(bucket)];
    const int have = static_cast<int>(l.params.size());
    if (params != nullptr && *nparams < have)
      fail(chorusInvalidArgument, "chorusDdpBucketInfo: params has room for *nparams={} but bucket {} holds {}",
           *nparams, bucket, have);
    *nparams = have;
    if (params != nullptr) std::copy(l.params.begin(), l.params.end(), params);
    if (bytes != nullptr) *bytes = l.bytes;
  });
}

chorusResult_t chorusDdpGetStats(chorusDdp_t d, chorusDdpStats* stats) {
  return withDdp(d, "chorusDdpGetStats", [&](ddp::Reducer& r) {
    if (stats == nullptr) fail(chorusInvalidArgument, "chorusDdpGetStats: stats is NULL");
    *stats = r.stats();
  });
}

chorusResult_t chorusDdpBucketTiming(chorusDdp_t d, int bucket, double* startedUs, double* finishedUs) {
  return withDdp(d, "chorusDdpBucketTiming", [&](ddp::Reducer& r) {
    const int nb = static_cast<int>(r.buckets().size());
    if (bucket < 0 || bucket >= nb)
      fail(chorusInvalidArgument, "chorusDdpBucketTiming: bucket={} is outside [0, nbuckets={})", bucket, nb);
    r.bucketTiming(bucket, startedUs, finishedUs);
  });
}

chorusResult_t chorusDdpDestroy(chorusDdp_t d) {
  {
    std::lock_guard<std::mutex> g(gMu);
    if (d == nullptr || gLive->erase(d) == 0)
      return apiCall(nullptr, [&] {
        fail(chorusInvalidArgument, "chorusDdpDestroy: ddp ({}) is {}", static_cast<void*>(d),
             d == nullptr ? "NULL" : "not a live chorusDdp_t: destroyed or never created");
      });
  }
  chorusComm_t comm = d->reducer->comm();
  return apiCall(comm, [&] { delete d; });  // recordError ignores a communicator that is gone
}

}  // extern "C"
