// The data-parallel trainer's model (ddp/trainer/mlp.h): backward agrees with finite differences, reports
// every used parameter once in backward order, accumulates across calls, follows moved gradient storage,
// steps with PyTorch's momentum formula, is bit-for-bit deterministic, and actually learns the synthetic data.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "ddp/trainer/mlp.h"

using namespace chorus::ddp::trainer;

namespace {

const std::vector<int> kSmall = {5, 7, 6, 3};

struct Batch {
  Dataset d;
  std::vector<float> w;
};

Batch batch(uint64_t seed, size_t n, int features, int classes, float weight) {
  Batch b{makeDataset(seed, n, features, classes), {}};
  b.w.assign(n, weight);
  return b;
}

float loss(Mlp& m, const Batch& b, bool branch) {
  return m.forward(b.d.x.data(), b.d.y.data(), b.w.data(), b.d.size(), branch);
}

std::vector<float> grads(Mlp& m, int p) { return std::vector<float>(m.grad(p), m.grad(p) + m.paramCount(p)); }

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// The order backward must report parameters in, for a model with L layers.
std::vector<int> backwardOrder(int L, bool branch) {
  std::vector<int> order;
  if (branch) order = {2 * L, 2 * L + 1};
  for (int l = L - 1; l >= 0; --l) order.insert(order.end(), {2 * l, 2 * l + 1});
  return order;
}

}  // namespace

TEST(Mlp, Shape) {
  Mlp m({5, 7, 6, 3}, 1, true);
  EXPECT_EQ(m.numLayers(), 3);
  EXPECT_EQ(m.numParams(), 8);
  EXPECT_TRUE(m.hasBranch());
  const size_t want[] = {35, 7, 42, 6, 18, 3, 15, 3};
  for (int p = 0; p < 8; ++p) EXPECT_EQ(m.paramCount(p), want[p]) << p;
  // The branch's weights come after the main layers' in the same stream, so those match a branchless model.
  Mlp plain({5, 7, 6, 3}, 1, false);
  EXPECT_EQ(plain.numParams(), 6);
  for (int p = 0; p < 6; ++p) EXPECT_EQ(0, std::memcmp(plain.param(p), m.param(p), m.paramCount(p) * 4)) << p;
  EXPECT_THROW(Mlp({5}, 1, false), std::invalid_argument);
  EXPECT_THROW(Mlp({5, 0, 3}, 1, false), std::invalid_argument);
  EXPECT_THROW(plain.backward(nullptr), std::logic_error);
  Batch b = batch(1, 4, 5, 3, 1.0f);
  EXPECT_THROW(loss(plain, b, true), std::invalid_argument);
  b.d.y[2] = 3;
  EXPECT_THROW(loss(m, b, false), std::invalid_argument);
}

namespace {

// Central differences of the float loss, for every element of every parameter (the model is small). The
// returned loss is rounded to float, so each difference carries up to one ulp(loss) of noise, ulp / (2 eps) in
// the derivative: the absolute tolerance is twice that. Every parameter must have clearly non-zero elements,
// so that a backward that returned zeros or dropped a term could not pass (some are legitimately zero: a ReLU
// unit dead for every sample passes no gradient). The wide shape exercises the kernels' 16-wide blocks and
// their tails.
void checkGradient(const std::vector<int>& dims, bool branch) {
  Mlp m(dims, 7, branch);
  Batch b = batch(3, 12, dims[0], dims.back(), 1.0f);
  for (size_t i = 0; i < b.w.size(); ++i) b.w[i] = 0.5f + 0.125f * float(i % 5);  // unequal weights
  m.zeroGrad();
  const float l0 = loss(m, b, branch);
  m.backward(nullptr);
  const float eps = 1e-3f;
  const double noise = (std::nextafter(l0, 2 * l0) - l0) / eps;
  int checked = 0, large = 0;
  for (int p = 0; p < m.numParams(); ++p) {
    int largeHere = 0;
    for (size_t e = 0; e < m.paramCount(p); ++e) {
      float* v = m.param(p) + e;
      const float saved = *v;
      *v = saved + eps;
      const double up = loss(m, b, branch);
      *v = saved - eps;
      const double down = loss(m, b, branch);
      *v = saved;
      const double fd = (up - down) / (2.0 * eps), an = m.grad(p)[e];
      EXPECT_NEAR(an, fd, 1e-2 * std::max(std::fabs(fd), std::fabs(an)) + noise) << "param " << p << " element " << e;
      ++checked;
      largeHere += std::fabs(an) > 20 * noise;
    }
    EXPECT_GT(largeHere, 0) << "param " << p << " has only near-zero gradients";
    large += largeHere;
  }
  EXPECT_GE(large, checked / 3) << "too many near-zero gradients";
}

}  // namespace

TEST(Mlp, GradientMatchesFiniteDifferences) {
  for (const std::vector<int>& dims : {kSmall, std::vector<int>{37, 20, 19, 3}})
    for (bool branch : {false, true}) {
      SCOPED_TRACE(testing::Message() << "in " << dims[0] << " branch " << branch);
      checkGradient(dims, branch);
    }
}

TEST(Mlp, ReadyOncePerUsedParameterInBackwardOrder) {
  Mlp m(kSmall, 2, true);
  const int L = m.numLayers();
  Batch b = batch(5, 8, 5, 3, 0.125f);
  for (size_t n : {size_t(8), size_t(0)})
    for (bool branch : {true, false}) {
      m.zeroGrad();
      // The unused branch's gradient must stay exactly as it was, sentinel values included.
      for (int p = 2 * L; p < 2 * L + 2; ++p)
        for (size_t e = 0; e < m.paramCount(p); ++e) m.grad(p)[e] = 42.0f + float(e);
      const float l = m.forward(b.d.x.data(), b.d.y.data(), b.w.data(), n, branch);
      std::vector<int> seen;
      m.backward([&](int p) { seen.push_back(p); });
      EXPECT_EQ(seen, backwardOrder(L, branch)) << "n " << n << " branch " << branch;
      for (int p = 0; p < m.numParams(); ++p) {
        bool untouched = true, zero = true;
        for (size_t e = 0; e < m.paramCount(p); ++e) {
          untouched &= m.grad(p)[e] == (p >= 2 * L ? 42.0f + float(e) : 0.0f);
          zero &= m.grad(p)[e] == 0.0f;
        }
        if (n == 0 || (p >= 2 * L && !branch)) {
          EXPECT_TRUE(untouched) << "n " << n << " param " << p;
        } else {
          EXPECT_FALSE(zero) << "n " << n << " param " << p;
        }
      }
      if (n == 0) {
        EXPECT_EQ(l, 0.0f);
      }
    }
}

TEST(Mlp, GradientsAccumulateAcrossHalves) {
  for (bool branch : {false, true}) {
    const size_t n = 16;
    Batch b = batch(9, n, 5, 3, 1.0f / n);
    Mlp whole(kSmall, 4, true), halves(kSmall, 4, true);
    whole.zeroGrad();
    halves.zeroGrad();
    loss(whole, b, branch);
    whole.backward(nullptr);
    for (size_t off : {size_t(0), n / 2}) {
      halves.forward(b.d.x.data() + off * 5, b.d.y.data() + off, b.w.data() + off, n / 2, branch);
      halves.backward(nullptr);
    }
    for (int p = 0; p < whole.numParams(); ++p)
      for (size_t e = 0; e < whole.paramCount(p); ++e)
        EXPECT_NEAR(halves.grad(p)[e], whole.grad(p)[e], 1e-5 * std::fabs(whole.grad(p)[e]) + 1e-9)
            << "branch " << branch << " param " << p << " element " << e;
  }
}

TEST(Mlp, ZeroWeightLeavesSampleOut) {
  Mlp a(kSmall, 6, false), b(kSmall, 6, false);
  Batch full = batch(11, 6, 5, 3, 1.0f);
  full.w[5] = 0.0f;
  a.zeroGrad();
  b.zeroGrad();
  const float la = loss(a, full, false);
  a.backward(nullptr);
  const float lb = b.forward(full.d.x.data(), full.d.y.data(), full.w.data(), 5, false);
  b.backward(nullptr);
  EXPECT_FLOAT_EQ(la, lb);
  for (int p = 0; p < a.numParams(); ++p)
    for (size_t e = 0; e < a.paramCount(p); ++e) EXPECT_FLOAT_EQ(a.grad(p)[e], b.grad(p)[e]);
}

TEST(Mlp, SetGradStorageMovesAndPreserves) {
  Mlp m(kSmall, 8, false);
  Batch b = batch(13, 8, 5, 3, 0.125f);
  m.zeroGrad();
  loss(m, b, false);
  m.backward(nullptr);
  const int p = 2;
  const std::vector<float> before = grads(m, p);
  float* own = m.grad(p);
  std::vector<float> bucket(m.paramCount(p) + 2, -1.0f);  // one guard element each side
  m.setGradStorage(p, bucket.data() + 1);
  EXPECT_EQ(m.grad(p), bucket.data() + 1);
  EXPECT_EQ(std::vector<float>(bucket.begin() + 1, bucket.end() - 1), before);
  std::fill_n(own, m.paramCount(p), 0.0f);  // the old storage is no longer read
  m.backward(nullptr);
  // A model that never moved its storage, after the same two backward passes, has the very same bits.
  Mlp ref(kSmall, 8, false);
  ref.zeroGrad();
  loss(ref, b, false);
  ref.backward(nullptr);
  ref.backward(nullptr);
  for (size_t e = 0; e < before.size(); ++e) EXPECT_EQ(bits(bucket[e + 1]), bits(ref.grad(p)[e])) << e;
  EXPECT_NE(grads(ref, p), before);
  EXPECT_EQ(bucket.front(), -1.0f);
  EXPECT_EQ(bucket.back(), -1.0f);
  const std::vector<float> doubled = grads(m, p);
  m.setGradStorage(p, nullptr);
  EXPECT_EQ(m.grad(p), own);
  EXPECT_EQ(grads(m, p), doubled);
  std::fill(bucket.begin(), bucket.end(), 7.0f);  // and the bucket is no longer read either
  EXPECT_EQ(grads(m, p), doubled);
  m.setGradStorage(p, bucket.data());
  m.zeroGrad();  // zeroGrad clears wherever the gradient lives
  for (size_t e = 0; e < m.paramCount(p); ++e) EXPECT_EQ(bucket[e], 0.0f);
  EXPECT_EQ(bucket[m.paramCount(p)], 7.0f);
}

// v = momentum * v + g; p -= lr * v, on every parameter, including one whose gradient stayed zero: it keeps
// moving on its velocity.
TEST(Mlp, SgdWithMomentum) {
  Mlp m({3, 2}, 31, false);
  const float lr = 0.1f, mom = 0.9f;
  std::vector<std::vector<float>> p(2), v(2);
  for (int i = 0; i < 2; ++i) {
    p[i].assign(m.param(i), m.param(i) + m.paramCount(i));
    v[i].assign(m.paramCount(i), 0.0f);
  }
  for (int step = 0; step < 3; ++step) {
    m.zeroGrad();
    for (size_t e = 0; e < m.paramCount(0); ++e) m.grad(0)[e] = step == 1 ? 0.0f : 0.5f - 0.25f * float(e);
    for (size_t e = 0; e < m.paramCount(1); ++e) m.grad(1)[e] = step == 2 ? 0.0f : 1.0f + float(e);
    for (int i = 0; i < 2; ++i)
      for (size_t e = 0; e < m.paramCount(i); ++e) {
        v[i][e] = mom * v[i][e] + m.grad(i)[e];
        p[i][e] -= lr * v[i][e];
      }
    m.sgdStep(lr, mom);
    for (int i = 0; i < 2; ++i)
      for (size_t e = 0; e < m.paramCount(i); ++e)
        EXPECT_FLOAT_EQ(m.param(i)[e], p[i][e]) << "step " << step << " param " << i << " element " << e;
  }
}

TEST(Mlp, DeterministicTraining) {
  Batch b = batch(17, 32, 5, 3, 1.0f / 32);
  Mlp m1(kSmall, 21, true), m2(kSmall, 21, true), other(kSmall, 22, true);
  for (int step = 0; step < 5; ++step)
    for (Mlp* m : {&m1, &m2}) {
      m->zeroGrad();
      loss(*m, b, step % 2 == 0);  // the branch is used on some steps only
      m->backward(nullptr);
      m->sgdStep(0.1f, 0.9f);
    }
  for (int p = 0; p < m1.numParams(); ++p) {
    EXPECT_EQ(0, std::memcmp(m1.param(p), m2.param(p), m1.paramCount(p) * sizeof(float))) << p;
    EXPECT_NE(0, std::memcmp(m1.param(p), other.param(p), m1.paramCount(p) * sizeof(float))) << p;
  }
}

TEST(Mlp, DatasetIsDeterministic) {
  const Dataset a = makeDataset(5, 300, 7, 4), b = makeDataset(5, 300, 7, 4), c = makeDataset(6, 300, 7, 4);
  ASSERT_EQ(a.size(), 300u);
  ASSERT_EQ(a.x.size(), 300u * 7);
  EXPECT_EQ(a.features, 7);
  EXPECT_EQ(a.classes, 4);
  EXPECT_EQ(0, std::memcmp(a.x.data(), b.x.data(), a.x.size() * sizeof(float)));
  EXPECT_EQ(a.y, b.y);
  EXPECT_NE(a.x, c.x);
  EXPECT_NE(a.y, c.y);
  std::vector<int> perClass(4, 0);
  for (int y : a.y) {
    ASSERT_GE(y, 0);
    ASSERT_LT(y, 4);
    ++perClass[y];
  }
  for (int k : perClass) EXPECT_GT(k, 40);
  // Pinned: the data must be the same on every machine and compiler, not just within one process.
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the float bit patterns and labels
  auto mix = [&h](uint32_t v) { h = (h ^ v) * 1099511628211ull; };
  for (float f : a.x) mix(bits(f));
  for (int y : a.y) mix(uint32_t(y));
  EXPECT_EQ(h, 0xceb5ac0dc819a00aull) << std::hex << h;
}

TEST(Mlp, LearnsTheSyntheticDataSet) {
  const size_t n = 512;
  Batch b = batch(23, n, 10, 4, 1.0f / n);
  Mlp m({10, 32, 4}, 29, false);
  float first = 0, last = 0;
  for (int step = 0; step < 200; ++step) {
    m.zeroGrad();
    last = loss(m, b, false);
    if (step == 0) first = last;
    m.backward(nullptr);
    m.sgdStep(0.1f, 0.9f);
  }
  EXPECT_GT(first, 1.0f);  // about ln 4 from a fresh model
  EXPECT_LT(last, 0.5f * first) << "first " << first << " last " << last;
}
