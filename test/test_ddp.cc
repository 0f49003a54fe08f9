// The DDP layer: bucket assignment (pure), and the reducer's semantics with in-process ranks: averages, launch
// order, rebuild, no_sync, unused parameters, buffers, compression, hooks, Join, and its errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "chorus/ddp.h"
#include "ddp/buckets.h"
#include "test/ranks.h"

using chorus::ddp::assignBuckets;
using chorus::ddp::ParamShape;
using chorus::ddp::reverseOrder;
using chorus::test::check;
using chorus::test::runRanks;

namespace {

constexpr size_t kMB = 1000 * 1000;

std::vector<std::vector<int>> paramsOf(const std::vector<chorus::ddp::BucketLayout>& b) {
  std::vector<std::vector<int>> out;
  for (const auto& l : b) out.push_back(l.params);
  return out;
}

TEST(Buckets, SeedExercise3) {  // seed 002 §8 exercise 3: 10, 2, 8, 20, 4 MB, cap 12 MB for every bucket
  std::vector<ParamShape> p = {{10 * kMB, chorusUint8}, {2 * kMB, chorusUint8}, {8 * kMB, chorusUint8},
                               {20 * kMB, chorusUint8}, {4 * kMB, chorusUint8}};
  auto b = assignBuckets(p, reverseOrder(5), 12 * kMB, 12 * kMB);
  EXPECT_EQ(paramsOf(b), (std::vector<std::vector<int>>{{4, 3}, {2, 1, 0}}));
  EXPECT_EQ(b[0].bytes, 24 * kMB);
  EXPECT_EQ(b[1].bytes, 20 * kMB);
}

TEST(Buckets, FirstBucketHasItsOwnCapAndReachingTheCapCloses) {
  // 4-byte floats: 256 elements = 1 KiB. first cap 1 KiB, then 3 KiB.
  std::vector<ParamShape> p(6, ParamShape{256, chorusFloat32});
  auto b = assignBuckets(p, reverseOrder(6), 1024, 3 * 1024);
  EXPECT_EQ(paramsOf(b), (std::vector<std::vector<int>>{{5}, {4, 3, 2}, {1, 0}}));
}

TEST(Buckets, DatatypesNeverShareAndBucketsFollowClosingOrder) {
  std::vector<ParamShape> p = {{100, chorusFloat32}, {100, chorusFloat64}, {100, chorusFloat32},
                               {1000, chorusFloat64}, {10, chorusFloat32}};
  // order 0..4; caps 1000 bytes. f32 bucket {0, 2, 4} = 840 bytes stays open; f64 {1, 3} closes at 8800.
  std::vector<int> order = {0, 1, 2, 3, 4};
  auto b = assignBuckets(p, order, 1000, 1000);
  EXPECT_EQ(paramsOf(b), (std::vector<std::vector<int>>{{1, 3}, {0, 2, 4}}));
  EXPECT_EQ(b[0].dtype, chorusFloat64);
  EXPECT_EQ(b[1].dtype, chorusFloat32);
  for (const auto& l : b) {
    size_t bytes = 0;
    for (int q : l.params) {
      EXPECT_EQ(p[q].dtype, l.dtype);
      bytes += p[q].count * (l.dtype == chorusFloat64 ? 8 : 4);
    }
    EXPECT_EQ(bytes, l.bytes);
  }
}

TEST(Buckets, EveryParameterExactlyOnceForRandomShapes) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 40);
    std::vector<ParamShape> p;
    for (int i = 0; i < n; ++i)
      p.push_back({rng() % 5000, rng() % 3 == 0 ? chorusFloat16 : chorusFloat32});
    std::vector<int> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    auto b = assignBuckets(p, order, 1 + rng() % 8000, 1 + rng() % 20000);
    std::vector<int> seen;
    for (const auto& l : b) seen.insert(seen.end(), l.params.begin(), l.params.end());
    std::sort(seen.begin(), seen.end());
    std::vector<int> all(static_cast<size_t>(n));
    std::iota(all.begin(), all.end(), 0);
    ASSERT_EQ(seen, all);
  }
}

// ---- a toy model: parameter i has counts[i] floats; rank r's gradient of element j is g(r, i, j, step) ----

float gradValue(int rank, int param, size_t j, int step) {
  return static_cast<float>((rank + 1) * 0.25 + param * 0.5 + static_cast<double>(j % 7) * 0.125 +
                            1e-3 * static_cast<double>(j % 1000) + step);
}

struct Model {
  std::vector<size_t> counts;
  std::vector<std::vector<float>> params, grads;
  std::vector<void*> pp, gp;
  std::vector<chorusDataType_t> types;
  explicit Model(std::vector<size_t> c, float init = 0) : counts(std::move(c)) {
    for (size_t n : counts) {
      params.emplace_back(n, init);
      grads.emplace_back(n, 0.f);
      types.push_back(chorusFloat32);
    }
    for (size_t i = 0; i < counts.size(); ++i) {
      pp.push_back(params[i].data());
      gp.push_back(grads[i].data());
    }
  }
  int n() const { return static_cast<int>(counts.size()); }
};

chorusDdp_t create(chorusComm_t comm, Model& m, chorusDdpConfig cfg, bool nullGrads = false) {
  chorusDdp_t d = nullptr;
  check(chorusDdpCreate(comm, m.n(), m.pp.data(), nullGrads ? nullptr : m.gp.data(), m.counts.data(),
                        m.types.data(), &cfg, &d),
        comm, "chorusDdpCreate");
  return d;
}

float* gradOf(chorusDdp_t d, int p) {
  void* g = nullptr;
  if (chorusDdpGradPointer(d, p, &g) != chorusSuccess) throw std::runtime_error("chorusDdpGradPointer");
  return static_cast<float*>(g);
}

// One step: gradients += g(rank, ...) for `params` (in the given order), marked ready one by one.
void step(chorusComm_t comm, chorusDdp_t d, const Model& m, int rank, int stepNo, const std::vector<int>& order,
          const int* used = nullptr, bool finalize = true) {
  check(chorusDdpPreForward(d), comm, "PreForward");
  check(chorusDdpPrepareForBackward(d, used), comm, "PrepareForBackward");
  for (int p : order) {
    float* g = gradOf(d, p);
    for (size_t j = 0; j < m.counts[static_cast<size_t>(p)]; ++j) g[j] += gradValue(rank, p, j, stepNo);
    check(chorusDdpMarkGradReady(d, p), comm, "MarkGradReady");
  }
  if (finalize) check(chorusDdpFinalizeBackward(d), comm, "FinalizeBackward");
}

void zeroGrads(chorusDdp_t d, const Model& m) {
  for (int p = 0; p < m.n(); ++p) std::fill_n(gradOf(d, p), m.counts[static_cast<size_t>(p)], 0.f);
}

// The average over ranks of g(r, p, j, s), summed over the steps in `steps`.
float expected(int nranks, int p, size_t j, const std::vector<int>& steps) {
  double sum = 0;
  for (int s : steps)
    for (int r = 0; r < nranks; ++r) sum += gradValue(r, p, j, s);
  return static_cast<float>(sum / nranks);
}

void expectAverages(chorusDdp_t d, const Model& m, int nranks, const std::vector<int>& steps, int rank) {
  for (int p = 0; p < m.n(); ++p) {
    const float* g = gradOf(d, p);
    for (size_t j = 0; j < m.counts[static_cast<size_t>(p)]; ++j)
      ASSERT_NEAR(g[j], expected(nranks, p, j, steps), 1e-4) << "rank " << rank << " param " << p << " elem " << j;
  }
}

std::vector<int> shuffled(int n, unsigned seed) {
  std::vector<int> v = reverseOrder(n);
  std::mt19937 rng(seed);
  std::shuffle(v.begin(), v.end(), rng);
  return v;
}

class DdpRanks : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(DdpRanks, AveragesWhateverOrderGradientsArriveIn) {
  const auto [nranks, view] = GetParam();
  auto errors = runRanks(nranks, [&, view = view, nranks = nranks](int rank, chorusComm_t& comm) {
    Model m({300, 7, 1, 4096, 33, 250000, 5});
    chorusDdpConfig cfg = CHORUS_DDP_CONFIG_INITIALIZER;
    cfg.gradientAsBucketView = view;
    cfg.firstBucketMb = 0.001;
    cfg.bucketCapMb = 0.01;
    chorusDdp_t d = create(comm, m, cfg, view);
    int nb = 0;
    check(chorusDdpBucketCount(d, &nb), comm, "BucketCount");
    if (nb < 3) throw std::runtime_error("expected several buckets, got " + std::to_string(nb));
    for (int s = 0; s < 4; ++s) {
      zeroGrads(d, m);
      step(comm, d, m, rank, s, shuffled(m.n(), static_cast<unsigned>(rank * 31 + s)));
      expectAverages(d, m, nranks, {s}, rank);
      if (!view) {  // the caller's own gradient arrays hold the averages
        for (size_t j = 0; j < m.counts[3]; ++j)
          if (std::fabs(m.grads[3][j] - expected(nranks, 3, j, {s})) > 1e-4) throw std::runtime_error("grads[3]");
      }
    }
    chorusDdpStats st{};
    check(chorusDdpGetStats(d, &st), comm, "GetStats");
    if (st.bytesSent == 0 && nranks > 1) throw std::runtime_error("stats: no bytes sent");
    check(chorusDdpDestroy(d), comm, "Destroy");
  });
  EXPECT_TRUE(errors.empty()) << errors.front();
}

INSTANTIATE_TEST_SUITE_P(All, DdpRanks, ::testing::Combine(::testing::Values(1, 2, 3, 4), ::testing::Bool()),
                         [](const auto& info) {
                           return std::to_string(std::get<0>(info.param)) + "ranks" +
                                  (std::get<1>(info.param) ? "_view" : "");
                         });

TEST(Ddp, ConstructionBroadcastsRank0sParameters) {
  auto errors = runRanks(3, [](int rank, chorusComm_t& comm) {
    Model m({10, 20}, static_cast<float>(rank + 1));
    chorusDdp_t d = create(comm, m, CHORUS_DDP_CONFIG_INITIALIZER);
    for (auto& p : m.params)
      for (float v : p)
        if (v != 1.f) throw std::runtime_error("parameter not broadcast from rank 0");
    chorusDdpDestroy(d);
  });
  EXPECT_TRUE(errors.empty()) << errors.front();
}

TEST(Ddp, RebuildUsesRank0sFirstReadyOrder) {
  auto errors = runRanks(2, [](int rank, chorusComm_t& comm) {
    Model m({256, 256, 256, 256});  // 1 KiB each
    chorusDdpConfig cfg = CHORUS_DDP_CONFIG_INITIALIZER;
    cfg.firstBucketMb = 1.0 / 1024;  // 1 KiB
    cfg.bucketCapMb = 2.0 / 1024;
    chorusDdp_t d = create(comm, m, cfg);
    auto bucket0 = [&] {
      int n = 8, ps[8];
      check(chorusDdpBucketInfo(d, 0, &n, ps, nullptr), comm, "BucketInfo");
      return std::vector<int>(ps, ps + n);
    };
    if (bucket0() != std::vector<int>{3}) throw std::runtime_error("initial bucket 0 is not {3}");
    // Rank 0's gradients arrive in forward order, rank 1's in another: everyone rebuilds with rank 0's.
    step(comm, d, m, rank, 0, rank == 0 ? std::vector<int>{0, 1, 2, 3} : std::vector<int>{2, 3, 1, 0});
    check(chorusDdpPreForward(d), comm, "PreForward");
    if (bucket0() != std::vector<int>{0}) throw std::runtime_error("bucket 0 after the rebuild is not {0}");
    int n = 8, ps[8];
    check(chorusDdpBucketInfo(d, 1, &n, ps, nullptr), comm, "BucketInfo");
    if (std::vector<int>(ps, ps + n) != std::vector<int>{1, 2}) throw std::runtime_error("bucket 1 not {1, 2}");
    zeroGrads(d, m);
    check(chorusDdpPrepareForBackward(d, nullptr), comm, "Prepare");
    for (int p : {0, 1, 2, 3}) {
      float* g = gradOf(d, p);
      for (size_t j = 0; j < 256; ++j) g[j] += gradValue(rank, p, j, 1);
      check(chorusDdpMarkGradReady(d, p), comm, "Mark");
    }
    check(chorusDdpFinalizeBackward(d), comm, "Finalize");
    expectAverages(d, m, 2, {1}, rank);
    chorusDdpDestroy(d);
  });
  EXPECT_TRUE(errors.empty()) << errors.front();
}

TEST(Ddp, NoSyncAccumulatesLocallyThenAveragesTheSum) {
  for (bool view : {false, true}) {
    auto errors = runRanks(3, [view](int rank, chorusComm_t& comm) {
      Model m({1000, 3, 77});
      chorusDdpConfig cfg = CHORUS_DDP_CONFIG_INITIALIZER;
      cfg.gradientAsBucketView = view;
      chorusDdp_t d = create(comm, m, cfg);
      zeroGrads(d, m);
      check(chorusDdpSetGradSync(d, 0), comm, "SetGradSync");
      for (int s = 0; s < 3; ++s) {
        step(comm, d, m, rank, s, {2, 1, 0});
        chorusDdpStats st{};
        chorusDdpGetStats(d, &st);
        if (st.bucketsLaunched != 0) throw std::runtime_error("a no_sync backward launched a bucket");
      }
      // Locally accumulated, not averaged: rank's own sum.
      if (std::fabs(gradOf(d, 1)[0] - (gradValue(rank, 1, 0, 0) + gradValue(rank, 1, 0, 1) + gradValue(rank, 1, 0, 2))) > 1e-4)
        throw std::runtime_error("no_sync changed the local gradients");
      check(chorusDdpSetGradSync(d, 1), comm, "SetGradSync");
      step(comm, d, m, rank, 3, {2, 1, 0});
      expectAverages(d, m, 3, {0, 1, 2, 3}, rank);
      chorusDdpDestroy(d);
    });
    EXPECT_TRUE(errors.empty()) << errors.front();
  }
}

TEST(Ddp, UnusedParameterWithoutFindUnusedIsAnErrorThatSaysWhatToDo) {
  std::vector<std::string> messages(2);
  auto errors = runRanks(2, [&](int rank, chorusComm_t& comm) {
    Model m({16, 16, 16, 16});
    chorusDdpConfig cfg = CHORUS_DDP_CONFIG_INITIALIZER;
    cfg.firstBucketMb = cfg.bucketCapMb = 128.0 / (1024 * 1024);  // two parameters per bucket
    chorusDdp_t d = create(comm, m, cfg);
    step(comm, d, m, rank, 0, {3, 2, 0}, nullptr, false);  // parameter 1 never becomes ready
    if (chorusDdpFinalizeBackward(d) != chorusInvalidUsage) throw std::runtime_error("finalize did not fail");
    messages[static_cast<size_t>(rank)] = chorusGetLastError(comm);
    chorusDdpDestroy(d);
  });
  ASSERT_TRUE(errors.empty()) << errors.front();
  for (int r = 0; r < 2; ++r) {
    const std::string& msg = messages[static_cast<size_t>(r)];
    EXPECT_NE(msg.find("findUnusedParameters"), std::string::npos) << msg;
    EXPECT_NE(msg.find("did not receive a gradient on rank " + std::to_string(r) + ": 1 "), std::string::npos) << msg;
    EXPECT_NE(msg.find("buckets never reduced: 1"), std::string::npos) << msg;
  }
}

TEST(Ddp, FindUnusedParametersAveragesOverUsersAndLeavesGloballyUnusedAlone) {
  for (bool view : {false, true})
    for (bool tellUsed : {false, true}) {
      auto errors = runRanks(3, [&](int rank, chorusComm_t& comm) {
        // param 1: used by rank 0 only; param 2: used by nobody; 0 and 3: by everyone.
        Model m({50, 60, 70, 80});
        chorusDdpConfig cfg = CHORUS_DDP_CONFIG_INITIALIZER;
        cfg.findUnusedParameters = 1;
        cfg.gradientAsBucketView = view;
        cfg.firstBucketMb = cfg.bucketCapMb = 200.0 / (1024 * 1024);
        chorusDdp_t d = create(comm, m, cfg);
        zeroGrads(d, m);
        std::fill_n(gradOf(d, 2), 70, 42.f);  // must survive: nobody uses param 2
        std::vector<int> order = rank == 0 ? std::vector<int>{3, 1, 0} : std::vector<int>{3, 0};
        int used[4] = {1, rank == 0, 0, 1};
        step(comm, d, m, rank, 0, order, tellUsed ? used : nullptr);
        for (int p : {0, 3})
          for (size_t j = 0; j < m.counts[static_cast<size_t>(p)]; ++j)
            if (std::fabs(gradOf(d, p)[j] - expected(3, p, j, {0})) > 1e-4) throw std::runtime_error("used param");
        for (size_t j = 0; j < 60; ++j)
          if (std::fabs(gradOf(d, 1)[j] - gradValue(0, 1, j, 0) / 3) > 1e-4)
            throw std::runtime_error("param used by rank 0 only is not its gradient / 3");
        for (size_t j = 0; j < 70; ++j)
          if (gradOf(d, 2)[j] != 42.f) throw std::runtime_error("globally unused gradient was changed");
        chorusDdpDestroy(d);
      });
      EXPECT_TRUE(errors.empty()) << "view " << view << " used[] " << tellUsed << ": " << errors.front();
    }
}

TEST(Ddp, MarkingAParameterTwiceIsAnError) {
  auto errors = runRanks(1, [](int, chorusComm_t& comm) {
    Model m({4, 4});
    chorusDdp_t d = create(comm, m, CHORUS_DDP_CONFIG_INITIALIZER);
    check(chorusDdpPreForward(d), comm, "PreForward");
    check(chorusDdpPrepareForBackward(d, nullptr), comm, "Prepare");
    check(chorusDdpMarkGradReady(d, 1), comm, "Mark");
    if (chorusDdpMarkGradReady(d, 1) != chorusInvalidUsage) throw std::runtime_error("second mark accepted");
    std::string msg = chorusGetLastError(comm);
    if (msg.find("parameter 1 was marked ready twice") == std::string::npos) throw std::runtime_error(msg);
    chorusDdpDestroy(d);
  });
  EXPECT_TRUE(errors.empty()) << errors.front();
}

TEST(Ddp, BuffersComeFromRank0AtEveryForward) {
  auto errors = runRanks(3, [](int rank, chorusComm_t& comm) {
    Model m({8});
    chorusDdp_t d = create(comm, m, CHORUS_DDP_CONFIG_INITIALIZER);
    std::vector<double> stats(5, rank * 10.0);
    void* bp = stats.data();
    size_t bc = stats.size();
    chorusDataType_t bt = chorusFloat64;
    check(chorusDdpRegisterBuffers(d, 1, &bp, &bc, &bt), comm, "RegisterBuffers");
    if (stats[0] != 0.0) throw std::runtime_error("buffers not broadcast at registration");
    for (int s = 1; s <= 3; ++s) {
      std::fill(stats.begin(), stats.end(), rank * 100.0 + s);  // each rank updates its running stats
      check(chorusDdpPreForward(d), comm, "PreForward");
      if (stats[4] != s) throw std::runtime_error("buffers not rank 0's at forward " + std::to_string(s));
      check(chorusDdpPrepareForBackward(d, nullptr), comm, "Prepare");
      check(chorusDdpMarkGradReady(d, 0), comm, "Mark");
      check(chorusDdpFinalizeBackward(d), comm, "Finalize");
    }
    chorusDdpDestroy(d);
  });
  EXPECT_TRUE(errors.empty()) << errors.front();
}

TEST(Ddp, Float16AndBfloat16CompressionStayWithinTheirPrecision) {
  for (int comp : {static_cast<int>(chorusFloat16), static_cast<int>(chorusBfloat16)}) {
    auto errors = runRanks(3, [comp](int rank, chorusComm_t& comm) {
      Model m({5000, 100});
      chorusDdpConfig cfg = CHORUS_DDP_CONFIG_INITIALIZER;
      cfg.compression = comp;
      chorusDdp_t d = create(comm, m, cfg);
      zeroGrads(d, m);
      step(comm, d, m, rank, 0, {1, 0});
      const double tol = comp == chorusFloat16 ? 2e-3 : 1.6e-2;  // relative: 11 and 8 significant bits, 3 roundings
      bool differs = false;
      for (int p = 0; p < 2; ++p)
        for (size_t j = 0; j < m.counts[static_cast<size_t>(p)]; ++j) {
          const float want = expected(3, p, j, {0}), got = gradOf(d, p)[j];
          if (std::fabs(got - want) > tol * std::fabs(want)) throw std::runtime_error("compressed value off");
          differs |= got != want;
        }
      if (!differs) throw std::runtime_error("no rounding at all: was the bucket compressed?");
      chorusDdpDestroy(d);
    });
    EXPECT_TRUE(errors.empty()) << "compression " << comp << ": " << errors.front();
  }
}

struct HookLog {
  std::atomic<int> calls{0};
  std::atomic<size_t> elements{0};
};

chorusResult_t maxHook(void* state, chorusComm_t comm, int, void* buffer, size_t count, chorusDataType_t dt,
                       chorusStream_t stream) {
  auto* log = static_cast<HookLog*>(state);
  ++log->calls;
  log->elements += count;
  return chorusAllReduce(buffer, buffer, count, dt, chorusMax, comm, stream);
}

TEST(Ddp, CommHookReplacesTheBucketAllReduce) {
  auto errors = runRanks(3, [](int rank, chorusComm_t& comm) {
    Model m({100, 200, 300});
    chorusDdpConfig cfg = CHORUS_DDP_CONFIG_INITIALIZER;
    cfg.firstBucketMb = cfg.bucketCapMb = 400.0 / (1024 * 1024);  // a bucket per parameter
    chorusDdp_t d = create(comm, m, cfg);
    HookLog log;
    check(chorusDdpRegisterCommHook(d, maxHook, &log), comm, "RegisterCommHook");
    zeroGrads(d, m);
    step(comm, d, m, rank, 0, {2, 1, 0});
    if (log.calls != 3 || log.elements != 600) throw std::runtime_error("hook calls/elements wrong");
    for (int p = 0; p < 3; ++p)  // max over ranks: the last rank's gradient
      if (gradOf(d, p)[5] != gradValue(2, p, 5, 0)) throw std::runtime_error("hook result not in the gradient");
    chorusDdpDestroy(d);
  });
  EXPECT_TRUE(errors.empty()) << errors.front();
}

TEST(Ddp, JoinLetsRanksWithLessDataFinish) {
  for (bool unused : {false, true}) {
    auto errors = runRanks(3, [unused](int rank, chorusComm_t& comm) {
      Model m({64, 64, 64});
      chorusDdpConfig cfg = CHORUS_DDP_CONFIG_INITIALIZER;
      cfg.findUnusedParameters = unused;
      cfg.firstBucketMb = cfg.bucketCapMb = 256.0 / (1024 * 1024);
      chorusDdp_t d = create(comm, m, cfg);
      std::vector<double> buf(3, rank);
      void* bp = buf.data();
      size_t bc = 3;
      chorusDataType_t bt = chorusFloat64;
      check(chorusDdpRegisterBuffers(d, 1, &bp, &bc, &bt), comm, "RegisterBuffers");
      const int steps = 2 + 2 * rank;  // 2, 4, 6 steps; one no_sync step in the middle
      for (int s = 0; s < steps; ++s) {
        zeroGrads(d, m);
        check(chorusDdpSetGradSync(d, s != 3), comm, "SetGradSync");
        step(comm, d, m, rank, s, {2, 1, 0});
        if (s == 3) continue;
        const int active = s < 2 ? 3 : s < 4 ? 2 : 1;  // ranks still stepping; joined ones add zeros
        for (size_t j = 0; j < 64; ++j) {
          double sum = 0;
          for (int r = 3 - active; r < 3; ++r) sum += gradValue(r, 1, j, s);
          if (std::fabs(gradOf(d, 1)[j] - sum / 3) > 1e-4)
            throw std::runtime_error("step " + std::to_string(s) + ": not the active ranks' sum / 3");
        }
      }
      check(chorusDdpJoin(d), comm, "Join");
      if (chorusDdpPreForward(d) != chorusInvalidUsage) throw std::runtime_error("forward after join accepted");
      chorusDdpDestroy(d);
    });
    EXPECT_TRUE(errors.empty()) << "findUnused " << unused << ": " << errors.front();
  }
}

TEST(Ddp, MismatchedModelsAreRejectedAtConstructionNamingParameterAndRanks) {
  std::vector<std::string> messages(3);
  auto errors = runRanks(3, [&](int rank, chorusComm_t& comm) {
    Model m(rank == 2 ? std::vector<size_t>{10, 21, 30} : std::vector<size_t>{10, 20, 30});
    chorusDdpConfig cfg = CHORUS_DDP_CONFIG_INITIALIZER;
    chorusDdp_t d = nullptr;
    if (chorusDdpCreate(comm, m.n(), m.pp.data(), m.gp.data(), m.counts.data(), m.types.data(), &cfg, &d) !=
        chorusInvalidUsage)
      throw std::runtime_error("mismatch accepted");
    messages[static_cast<size_t>(rank)] = chorusGetLastError(comm);
    Model k(rank == 1 ? std::vector<size_t>{10} : std::vector<size_t>{10, 20});
    if (chorusDdpCreate(comm, k.n(), k.pp.data(), k.gp.data(), k.counts.data(), k.types.data(), &cfg, &d) !=
        chorusInvalidUsage)
      throw std::runtime_error("count mismatch accepted");
    std::string msg = chorusGetLastError(comm);
    if (msg.find("rank 0 registered 2 parameters and rank 1 registered 1") == std::string::npos)
      throw std::runtime_error(msg);
  });
  ASSERT_TRUE(errors.empty()) << errors.front();
  for (const auto& msg : messages)
    EXPECT_NE(msg.find("parameter 1 has 20 elements of float32 on rank 0 and 21 elements of float32 on rank 2"),
              std::string::npos)
        << msg;
}

TEST(Ddp, BadArgumentsAndCallsOutOfOrderNameTheProblem) {
  auto errors = runRanks(2, [](int rank, chorusComm_t& comm) {
    auto expectError = [&](chorusResult_t got, chorusResult_t want, const char* needle) {
      if (got != want) throw std::runtime_error(std::string("wrong code for ") + needle);
      std::string msg = chorusGetLastError(comm);
      if (msg.find(needle) == std::string::npos) throw std::runtime_error("'" + msg + "' lacks '" + needle + "'");
    };
    Model m({4, 4});
    chorusDdp_t d = nullptr;
    chorusDdpConfig cfg = CHORUS_DDP_CONFIG_INITIALIZER;
    cfg.size = rank == 1 ? 8 : sizeof cfg;  // rank 1 passes a config of another ABI; rank 0 must not hang
    chorusResult_t rc = chorusDdpCreate(comm, m.n(), m.pp.data(), m.gp.data(), m.counts.data(), m.types.data(),
                                        &cfg, &d);
    if (rank == 1) expectError(rc, chorusInvalidArgument, "config->size=8");
    else expectError(rc, chorusInvalidUsage, "rank 1 rejected its arguments");
    cfg.size = sizeof cfg;
    chorusDataType_t bad[2] = {chorusFloat32, chorusInt32};
    rc = chorusDdpCreate(comm, 2, m.pp.data(), m.gp.data(), m.counts.data(), bad, &cfg, &d);
    expectError(rc, chorusInvalidArgument, "datatypes[1]=2 is not a floating-point");
    d = create(comm, m, cfg);
    expectError(chorusDdpMarkGradReady(d, 0), chorusInvalidUsage, "call chorusDdpPrepareForBackward");
    expectError(chorusDdpFinalizeBackward(d), chorusInvalidUsage, "called out of order");
    check(chorusDdpPreForward(d), comm, "PreForward");
    check(chorusDdpPrepareForBackward(d, nullptr), comm, "Prepare");
    expectError(chorusDdpMarkGradReady(d, 2), chorusInvalidArgument, "param=2 is outside [0, nparams=2)");
    expectError(chorusDdpPreForward(d), chorusInvalidUsage, "call chorusDdpFinalizeBackward");
    check(chorusDdpMarkGradReady(d, 0), comm, "Mark");
    check(chorusDdpMarkGradReady(d, 1), comm, "Mark");
    check(chorusDdpFinalizeBackward(d), comm, "Finalize");
    int n = 0;
    expectError(chorusDdpBucketInfo(d, 5, &n, nullptr, nullptr), chorusInvalidArgument, "bucket=5 is outside");
    check(chorusDdpDestroy(d), comm, "Destroy");
    if (chorusDdpDestroy(d) != chorusInvalidArgument) throw std::runtime_error("double destroy accepted");
    if (chorusDdpPreForward(nullptr) != chorusInvalidArgument) throw std::runtime_error("NULL handle accepted");
  });
  EXPECT_TRUE(errors.empty()) << errors.front();
}

}  // namespace
