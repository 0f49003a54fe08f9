// chorus_ddp_train: trains an MLP (ddp/trainer/mlp.h) with Chorus DDP, N ranks each taking its shard of every
// global batch, and with --check proves that N-rank training equals single-process training step by step.
//
// The global batch of a micro-batch is `batch` consecutive samples; rank r takes a contiguous shard of it. Each
// sample's loss weight is N / (batch * K) on its rank (K micro-batches per step), so that DDP's average over the
// N ranks is the mean over the whole global batch. The reference runs the K micro-batches of a step as one
// batch on one process with weight 1 / (batch * K), and 0 for the samples of ranks that already ran out of data
// (--uneven: they joined and contribute zeros, while DDP still divides by N).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "chorus/chorus.h"
#include "chorus/ddp.h"
#include "ddp/trainer/mlp.h"
#include "ddp/trainer/options.h"
#include "ddp/trainer/trace.h"

using namespace chorus::ddp::trainer;

namespace {

chorusComm_t gComm = nullptr;

void ck(chorusResult_t rc, const char* what) {
  if (rc == chorusSuccess) return;
  int rank = -1;
  if (gComm != nullptr) chorusCommUserRank(gComm, &rank);
  std::fprintf(stderr, "rank %d: %s failed: %s: %s\n", rank, what, chorusGetErrorString(rc), chorusGetLastError(gComm));
  std::exit(1);
}

double allReduceMax(double v) {
  ck(chorusAllReduce(&v, &v, 1, chorusFloat64, chorusMax, gComm, nullptr), "AllReduce (max)");
  return v;
}

double allReduceSum(double v) {
  ck(chorusAllReduce(&v, &v, 1, chorusFloat64, chorusSum, gComm, nullptr), "AllReduce (sum)");
  return v;
}

// Steps rank r takes: all of them, or with --uneven fewer for every higher rank (at least one).
int stepsOf(const Options& o, int r, int n) {
  if (!o.uneven) return o.steps;
  const int gap = std::max(1, o.steps / (2 * n));
  return std::max(1, o.steps - r * gap);
}

struct Shard {
  size_t begin, end;  // within the global micro-batch
};
Shard shardOf(int batch, int r, int n) {
  const auto b = static_cast<size_t>(batch), nn = static_cast<size_t>(n), rr = static_cast<size_t>(r);
  return {b * rr / nn, b * (rr + 1) / nn};
}

// max over parameters of max|a - b| / max|b|: relative to each tensor's scale, so that elements near zero do
// not dominate.
double maxRelDiff(Mlp& a, Mlp& b) {
  double worst = 0;
  for (int p = 0; p < a.numParams(); ++p) {
    double diff = 0, scale = 0;
    for (size_t i = 0; i < a.paramCount(p); ++i) {
      diff = std::max(diff, static_cast<double>(std::fabs(a.param(p)[i] - b.param(p)[i])));
      scale = std::max(scale, static_cast<double>(std::fabs(b.param(p)[i])));
    }
    worst = std::max(worst, scale > 0 ? diff / scale : diff);
  }
  return worst;
}

uint64_t hashParams(Mlp& m) {  // FNV-1a over the bytes: equal hashes on all ranks = bit-identical replicas
  uint64_t h = 1469598103934665603ull;
  for (int p = 0; p < m.numParams(); ++p) {
    const auto* b = reinterpret_cast<const unsigned char*>(m.param(p));
    for (size_t i = 0; i < m.paramCount(p) * sizeof(float); ++i) h = (h ^ b[i]) * 1099511628211ull;
  }
  return h;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parseOptions(argc, argv);
  ck(chorusCommInitFromEnv(&gComm), "chorusCommInitFromEnv");
  int rank = 0, n = 1;
  chorusCommUserRank(gComm, &rank);
  chorusCommCount(gComm, &n);
  const int K = o.noSync, myLast = stepsOf(o, rank, n);
  const bool branch = o.unusedEvery > 0;

  std::vector<int> dims = {o.features};
  for (int l = 1; l < o.layers; ++l) dims.push_back(o.width);
  dims.push_back(o.classes);
  const size_t micro = static_cast<size_t>(o.batch), perStep = micro * static_cast<size_t>(K);
  const Dataset data = makeDataset(o.seed, perStep * static_cast<size_t>(o.steps), o.features, o.classes);
  Mlp model(dims, o.seed + 1000 * static_cast<uint64_t>(rank), branch);  // rank-dependent: DDP must broadcast
  Mlp reference(dims, o.seed, branch);
  const int np = model.numParams();

  std::vector<void*> params, grads;
  std::vector<size_t> counts;
  std::vector<chorusDataType_t> types(static_cast<size_t>(np), chorusFloat32);
  for (int p = 0; p < np; ++p) {
    params.push_back(model.param(p));
    grads.push_back(model.grad(p));
    counts.push_back(model.paramCount(p));
  }
  chorusDdpConfig cfg = CHORUS_DDP_CONFIG_INITIALIZER;
  cfg.bucketCapMb = o.bucketCapMb;
  cfg.firstBucketMb = o.firstBucketMb;
  cfg.findUnusedParameters = o.findUnused;
  cfg.gradientAsBucketView = o.view;
  cfg.compression = o.compress;
  chorusDdp_t ddp = nullptr;
  ck(chorusDdpCreate(gComm, np, params.data(), grads.data(), counts.data(), types.data(), &cfg, &ddp),
     "chorusDdpCreate");
  // Rank 0's initial weights everywhere: the reference starts from them too.
  for (int p = 0; p < np; ++p)
    if (rank == 0) std::memcpy(reference.param(p), model.param(p), model.paramCount(p) * sizeof(float));
  for (int p = 0; p < np; ++p)
    ck(chorusBroadcast(reference.param(p), reference.param(p), model.paramCount(p), chorusFloat32, 0, gComm, nullptr),
       "Broadcast (reference)");
  auto attachGrads = [&](bool attach) {  // gradientAsBucketView: the model computes into the buckets
    for (int p = 0; p < np && o.view; ++p) {
      void* g = nullptr;
      if (attach) ck(chorusDdpGradPointer(ddp, p, &g), "chorusDdpGradPointer");
      model.setGradStorage(p, static_cast<float*>(g));
    }
  };
  attachGrads(true);
  model.zeroGrad();

  ck(chorusBarrier(gComm, nullptr), "Barrier");
  Trace trace(nowUs());
  if (rank == 0 && !o.quiet)
    std::printf("# %d ranks, layers %d, width %d, batch %d x %d micro, %s%s%s\n"
                "%6s %10s %10s %10s %10s %10s %9s %12s\n",
                n, o.layers, o.width, o.batch, K, o.noOverlap ? "no overlap" : "overlap",
                o.view ? ", gradient as bucket view" : "", o.check ? ", checked against one process" : "", "step",
                "loss", "step_ms", "backward_ms", "comm_ms", "exposed_ms", "overlap%", o.check ? "max_rel_diff" : "");
  std::vector<double> stepMs, backwardMs, exposedMs, commMs;
  std::vector<int> used(static_cast<size_t>(np), 1), pendingReady;
  double worstDiff = 0;
  bool identical = true;
  uint64_t bytes = 0;
  int nbuckets = 0, forwards = 0;
  for (int s = 0; s < myLast; ++s) {
    const bool useBranch = branch && s % o.unusedEvery != o.unusedEvery - 1;
    for (int p = 0; p < np; ++p) used[static_cast<size_t>(p)] = useBranch || p < 2 * model.numLayers();
    const double t0 = nowUs();
    double localLoss = 0;
    chorusDdpStats st{};
    for (int m = 0; m < K; ++m) {
      ck(chorusDdpSetGradSync(ddp, m == K - 1), "chorusDdpSetGradSync");
      const bool rebuild = forwards++ == 1;  // the buckets are rebuilt at the second forward (first-ready order)
      if (rebuild) attachGrads(false);
      const double tf = nowUs();
      ck(chorusDdpPreForward(ddp), "chorusDdpPreForward");
      if (rebuild) attachGrads(true);
      const size_t base = (static_cast<size_t>(s) * K + static_cast<size_t>(m)) * micro;
      const Shard sh = shardOf(o.batch, rank, n);
      const size_t cnt = sh.end - sh.begin;
      std::vector<float> w(cnt, static_cast<float>(n) / static_cast<float>(perStep));
      localLoss += model.forward(&data.x[(base + sh.begin) * static_cast<size_t>(o.features)],
                                 &data.y[base + sh.begin], w.data(), cnt, useBranch);
      ck(chorusDdpPrepareForBackward(ddp, o.findUnused ? used.data() : nullptr), "chorusDdpPrepareForBackward");
      const double tb = nowUs();
      trace.compute("forward", tf, tb);
      double last = tb;
      pendingReady.clear();
      model.backward([&](int p) {
        if (p % 2 == 1) {  // a layer's bias is its last gradient: the layer's backward is done
          const double now = nowUs();
          trace.compute(p >= 2 * model.numLayers() ? "backward branch" : "backward layer " + std::to_string(p / 2),
                        last, now);
          last = now;
        }
        if (o.noOverlap) pendingReady.push_back(p);
        else ck(chorusDdpMarkGradReady(ddp, p), "chorusDdpMarkGradReady");
      });
      for (int p : pendingReady) ck(chorusDdpMarkGradReady(ddp, p), "chorusDdpMarkGradReady");
      const double tw = nowUs();
      ck(chorusDdpFinalizeBackward(ddp), "chorusDdpFinalizeBackward");
      trace.compute("wait for gradients", tw, nowUs());
      ck(chorusDdpGetStats(ddp, &st), "chorusDdpGetStats");
      if (m == K - 1) {
        ck(chorusDdpBucketCount(ddp, &nbuckets), "chorusDdpBucketCount");
        for (int b = 0; b < nbuckets; ++b) {
          double started = 0, finished = 0;
          ck(chorusDdpBucketTiming(ddp, b, &started, &finished), "chorusDdpBucketTiming");
          if (started >= 0) trace.comm("bucket " + std::to_string(b), tb + started, tb + finished);
        }
      }
    }
    const double to = nowUs();
    model.sgdStep(static_cast<float>(o.lr), static_cast<float>(o.momentum));
    model.zeroGrad();
    const double t1 = nowUs();
    trace.compute("optimizer", to, t1);
    stepMs.push_back((t1 - t0) / 1000);
    exposedMs.push_back(st.exposedUs / 1000);
    commMs.push_back(st.commUs / 1000);
    backwardMs.push_back(st.backwardUs / 1000);
    bytes = st.bytesSent;

    // Everything below is reporting, not timed.
    double diff = 0;
    if (o.check) {  // the same step on one process: the whole global batch, joined ranks' samples weighted 0
      const size_t base = static_cast<size_t>(s) * perStep;
      std::vector<float> w(perStep, 1.0f / static_cast<float>(perStep));
      for (int r = 0; r < n; ++r)
        if (s >= stepsOf(o, r, n))
          for (int m = 0; m < K; ++m) {
            const Shard sh = shardOf(o.batch, r, n);
            std::fill(w.begin() + static_cast<long>(static_cast<size_t>(m) * micro + sh.begin),
                      w.begin() + static_cast<long>(static_cast<size_t>(m) * micro + sh.end), 0.0f);
          }
      reference.forward(&data.x[base * static_cast<size_t>(o.features)], &data.y[base], w.data(), perStep, useBranch);
      reference.backward([](int) {});
      reference.sgdStep(static_cast<float>(o.lr), static_cast<float>(o.momentum));
      reference.zeroGrad();
      diff = maxRelDiff(model, reference);
      worstDiff = std::max(worstDiff, diff);
    }
    const double expPct = commMs.back() > 0 ? 100 * std::max(0.0, 1 - exposedMs.back() / commMs.back()) : 0;
    if (o.uneven) {  // ranks that joined answer only DDP's collectives: no per-step reporting collectives
      if (rank == 0 && !o.quiet)
        std::printf("%6d %10s %10.2f %10.2f %10.2f %10.2f %9.1f %12.3g (rank 0)\n", s, "-", stepMs.back(),
                    backwardMs.back(), commMs.back(), exposedMs.back(), expPct, diff);
      continue;
    }
    const double loss = allReduceSum(localLoss) / n;
    diff = allReduceMax(diff);
    uint64_t h = hashParams(model), lo = h, hi = h;
    ck(chorusAllReduce(&lo, &lo, 1, chorusUint64, chorusMin, gComm, nullptr), "AllReduce (min)");
    ck(chorusAllReduce(&hi, &hi, 1, chorusUint64, chorusMax, gComm, nullptr), "AllReduce (max)");
    identical = identical && lo == hi;
    if (rank == 0 && !o.quiet) {
      std::printf("%6d %10.6f %10.2f %10.2f %10.2f %10.2f %9.1f", s, loss, stepMs.back(), backwardMs.back(),
                  commMs.back(), exposedMs.back(), expPct);
      if (o.check) std::printf(" %12.3g%s", diff, lo == hi ? "" : "  replicas differ!");
      std::printf("\n");
    }
  }
  if (o.uneven) ck(chorusDdpJoin(ddp), "chorusDdpJoin");
  worstDiff = allReduceMax(worstDiff);  // with --uneven each rank is compared with the reference at its last step

  // Summary over the steps after the first (the first builds buckets and warms up), medians.
  auto tail = [](std::vector<double> v) {
    if (v.size() > 1) v.erase(v.begin());
    return v;
  };
  const double stepMed = allReduceMax(median(tail(stepMs))), commMed = allReduceMax(median(tail(commMs)));
  const double expMed = allReduceMax(median(tail(exposedMs))), bwdMed = allReduceMax(median(tail(backwardMs)));
  if (!o.trace.empty() && !trace.write(gComm, o.trace)) return 1;
  const double limit = o.compress >= 0 ? 1e-2 : 1e-5;  // 16-bit gradients round to ~1e-3 per step
  size_t paramBytes = 0;
  for (size_t c : counts) paramBytes += c * sizeof(float);
  if (rank == 0) {
    std::printf("# summary: %d ranks, %zu parameters (%.2f MiB) in %d buckets, %s\n", n, paramBytes / 4,
                static_cast<double>(paramBytes) / (1 << 20), nbuckets, o.noOverlap ? "no overlap" : "overlap");
    std::printf("# median step %.2f ms, backward %.2f ms, communication %.2f ms, exposed %.2f ms, hidden %.1f%%, "
                "sent %.2f MiB/step\n", stepMed, bwdMed, commMed, expMed,
                commMed > 0 ? 100 * std::max(0.0, 1 - expMed / commMed) : 0, static_cast<double>(bytes) / (1 << 20));
    if (o.check)
      std::printf("# check: max relative difference to the single-process reference %.3g (limit %g)%s\n", worstDiff,
                  limit, identical ? ", replicas bit-identical" : ", REPLICAS DIFFER");
  }
  ck(chorusDdpDestroy(ddp), "chorusDdpDestroy");
  ck(chorusCommDestroy(gComm), "chorusCommDestroy");
  return o.check && (worstDiff > limit || !identical) ? 3 : 0;
}
