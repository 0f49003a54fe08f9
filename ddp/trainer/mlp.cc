// The MLP's arithmetic. The forward product is a dot product of contiguous rows (addLinear); the backward
// ones are row updates, y += a * x (gemmAcc). Both inner loops run over contiguous memory so GCC vectorises
// them at -O2, and neither needs the weights transposed. Each output element sums its products in an order
// fixed by the sizes alone, so results are bit-for-bit reproducible run to run.
#include "ddp/trainer/mlp.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <utility>

namespace chorus::ddp::trainer {
namespace {

// splitmix64 (Steele, Lea, Flood 2014): a fixed algorithm, unlike the standard library's distributions.
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [-1, 1) on a grid of 2^-23: every value and the conversion are exact.
  float uniform() { return float(int64_t(next() >> 40) - (int64_t(1) << 23)) * (1.0f / float(1 << 23)); }
};

// The two kernels below work in fixed blocks of 16 because GCC's -O2 cost model ("very-cheap") vectorises only
// loops whose trip count is a known multiple of the vector width; unrolling the block keeps dot's accumulators
// in registers (and saves about 15% in axpy). Neither changes which products are added in which order.
constexpr size_t kBlock = 16;

// y[0..n) += a * x[0..n).
inline void axpy(float a, const float* __restrict x, float* __restrict y, size_t n) {
  size_t j = 0;
  for (; j + kBlock <= n; j += kBlock)
#pragma GCC unroll 16
    for (size_t t = 0; t < kBlock; ++t) y[j + t] += a * x[j + t];
  for (; j < n; ++j) y[j] += a * x[j];
}

// sum x[j] * y[j] as kBlock partial sums (lane t takes the whole blocks' j with j % kBlock == t), added up in
// lane order, then the tail: an order fixed by n alone.
inline float dot(const float* __restrict x, const float* __restrict y, size_t n) {
  float acc[kBlock] = {};
  size_t j = 0;
  for (; j + kBlock <= n; j += kBlock)
#pragma GCC unroll 16
    for (size_t t = 0; t < kBlock; ++t) acc[t] += x[j + t] * y[j + t];
  float s = 0;
  for (size_t t = 0; t < kBlock; ++t) s += acc[t];
  for (; j < n; ++j) s += x[j] * y[j];
  return s;
}

// c (rows x p) += A * b, with A (rows x q) read as a[i * ai + k * ak] (so a transposed A costs nothing) and b
// (q x p) row-major. A tile of kRows rows of c stays in L1 while each row of b is read once per tile; c[i][j]
// adds its q products in k order whatever the tiling.
void gemmAcc(const float* a, size_t ai, size_t ak, const float* b, float* c, size_t rows, size_t q, size_t p) {
  constexpr size_t kRows = 4;
  for (size_t i0 = 0; i0 < rows; i0 += kRows) {
    const size_t i1 = std::min(rows, i0 + kRows);
    for (size_t k = 0; k < q; ++k)
      for (size_t i = i0; i < i1; ++i) axpy(a[i * ai + k * ak], b + k * p, c + i * p, p);
  }
}

// z (n x out) += a (n x in) * w^T + b, with w stored out x in: each output a dot product of two contiguous
// rows, so w needs no transposing. kCols rows of w stay in L1 while every row of a streams past them.
void addLinear(const float* a, size_t n, size_t in, size_t out, const float* w, const float* b, float* z) {
  constexpr size_t kCols = 4;
  for (size_t o0 = 0; o0 < out; o0 += kCols)
    for (size_t i = 0; i < n; ++i)
      for (size_t o = o0; o < std::min(out, o0 + kCols); ++o) z[i * out + o] += b[o] + dot(a + i * in, w + o * in, in);
}

}  // namespace

Dataset makeDataset(uint64_t seed, size_t samples, int features, int classes) {
  if (features < 1 || classes < 1) throw std::invalid_argument("makeDataset: features and classes must be >= 1");
  // Fixed point with kOne == 1.0: integer sums are exact, and |value| < 3 * 2^20 fits a float's 24-bit
  // significand, so the final scaling by a power of two is exact too (no libm, no rounding-mode dependence).
  constexpr int64_t kOne = int64_t(1) << 20;
  SplitMix64 rng{seed};
  std::vector<int64_t> centres(size_t(classes) * features);
  for (int64_t& c : centres) c = int64_t(rng.next() >> 43) - kOne;  // [-1, 1)
  Dataset d;
  d.features = features;
  d.classes = classes;
  d.x.resize(samples * features);
  d.y.resize(samples);
  for (size_t s = 0; s < samples; ++s) {
    const int label = int(rng.next() % uint64_t(classes));
    d.y[s] = label;
    for (int f = 0; f < features; ++f) {
      int64_t v = centres[size_t(label) * features + f];
      // Four uniforms in [-1/2, 1/2): a bell-shaped noise of variance 1/3, without transcendental functions.
      for (int t = 0; t < 4; ++t) v += int64_t(rng.next() >> 44) - kOne / 2;
      d.x[s * features + f] = float(v) * (1.0f / float(kOne));
    }
  }
  return d;
}

Mlp::Mlp(const std::vector<int>& dims, uint64_t seed, bool branch) : dims_(dims), branch_(branch) {
  if (dims.size() < 2) throw std::invalid_argument("Mlp: dims needs at least {in, out}");
  for (int d : dims)
    if (d < 1) throw std::invalid_argument("Mlp: every dim must be >= 1");
  SplitMix64 rng{seed};
  auto add = [&](int in, int out) {
    const float bound = 1.0f / std::sqrt(float(in));  // sqrt and division are correctly rounded: portable
    std::vector<float> w(size_t(out) * in), b(out);
    for (float& v : w) v = bound * rng.uniform();
    for (float& v : b) v = bound * rng.uniform();
    params_.push_back(std::move(w));
    params_.push_back(std::move(b));
  };
  for (size_t l = 0; l + 1 < dims.size(); ++l) add(dims[l], dims[l + 1]);
  if (branch) add(dims.front(), dims.back());
  for (const auto& p : params_) {
    ownGrads_.emplace_back(p.size(), 0.0f);
    velocity_.emplace_back(p.size(), 0.0f);
  }
  for (auto& g : ownGrads_) grads_.push_back(g.data());
  acts_.resize(numLayers());
}

int Mlp::numParams() const { return int(params_.size()); }
int Mlp::numLayers() const { return int(dims_.size()) - 1; }
bool Mlp::hasBranch() const { return branch_; }
float* Mlp::param(int i) { return params_.at(i).data(); }
size_t Mlp::paramCount(int i) const { return params_.at(i).size(); }
float* Mlp::grad(int i) { return grads_.at(i); }

void Mlp::setGradStorage(int i, float* storage) {
  float* dst = storage ? storage : ownGrads_.at(i).data();
  if (dst != grads_[i]) std::memmove(dst, grads_[i], paramCount(i) * sizeof(float));  // count >= 1
  grads_[i] = dst;
}

void Mlp::zeroGrad() {
  for (int i = 0; i < numParams(); ++i) std::fill_n(grads_[i], paramCount(i), 0.0f);
}

float Mlp::forward(const float* x, const int* y, const float* w, size_t n, bool useBranch) {
  const int L = numLayers(), classes = dims_.back();
  if (useBranch && !branch_) throw std::invalid_argument("Mlp::forward: useBranch on a model without a branch");
  if (n > 0 && (!x || !y || !w)) throw std::invalid_argument("Mlp::forward: null input");
  for (size_t i = 0; i < n; ++i)
    if (y[i] < 0 || y[i] >= classes) throw std::invalid_argument("Mlp::forward: label out of range");
  n_ = n;
  usedBranch_ = useBranch;
  haveForward_ = true;
  acts_[0].assign(x, x + n * dims_[0]);
  for (int l = 0; l < L; ++l) {
    // The last layer writes the logits straight into dlogits_, which is turned into the gradient below.
    std::vector<float>& z = l + 1 < L ? acts_[l + 1] : dlogits_;
    z.assign(n * dims_[l + 1], 0.0f);
    addLinear(acts_[l].data(), n, dims_[l], dims_[l + 1], param(2 * l), param(2 * l + 1), z.data());
    if (l + 1 < L)
      for (float& v : z) v = v > 0.0f ? v : 0.0f;
  }
  if (useBranch)
    addLinear(acts_[0].data(), n, dims_[0], classes, param(2 * L), param(2 * L + 1), dlogits_.data());

  // Softmax cross-entropy, shifted by the row maximum so exp cannot overflow. d loss / d logit_j is
  // w * (softmax_j - [j == y]).
  double loss = 0;
  for (size_t i = 0; i < n; ++i) {
    float* z = dlogits_.data() + i * classes;
    const float m = *std::max_element(z, z + classes);
    const float zy = z[y[i]] - m;
    float sum = 0;
    for (int j = 0; j < classes; ++j) sum += (z[j] = std::exp(z[j] - m));
    loss += double(w[i]) * (double(std::log(sum)) - double(zy));
    for (int j = 0; j < classes; ++j) z[j] = w[i] * (z[j] / sum - (j == y[i] ? 1.0f : 0.0f));
  }
  return float(loss);
}

void Mlp::backward(const std::function<void(int param)>& ready) {
  if (!haveForward_) throw std::logic_error("Mlp::backward: no forward to back-propagate");
  const int L = numLayers();
  const size_t n = n_;
  auto report = [&](int p) {
    if (ready) ready(p);
  };
  // Adds a layer's weight and bias gradients given dz = d loss / d output (n x out) and its input a.
  auto paramGrads = [&](int wi, const float* dz, const float* a, size_t in, size_t out) {
    gemmAcc(dz, 1, out, a, grads_[wi], out, n, in);  // dW += dz^T a
    report(wi);
    for (size_t i = 0; i < n; ++i) axpy(1.0f, dz + i * out, grads_[wi + 1], out);
    report(wi + 1);
  };

  const float* dz = dlogits_.data();
  if (usedBranch_) paramGrads(2 * L, dz, acts_[0].data(), dims_[0], dims_[L]);
  for (int l = L - 1; l >= 0; --l) {
    const size_t in = dims_[l], out = dims_[l + 1];
    paramGrads(2 * l, dz, acts_[l].data(), in, out);
    if (l == 0) break;  // nobody needs d loss / d x
    // da = dz W, then through the ReLU that produced acts_[l] (its derivative is 1 exactly where output > 0).
    da_.assign(n * in, 0.0f);
    gemmAcc(dz, out, 1, param(2 * l), da_.data(), n, out, in);
    const std::vector<float>& a = acts_[l];
    for (size_t k = 0; k < n * in; ++k)
      if (!(a[k] > 0.0f)) da_[k] = 0.0f;
    std::swap(dz_, da_);
    dz = dz_.data();
  }
}

void Mlp::sgdStep(float lr, float momentum) {
  for (int i = 0; i < numParams(); ++i) {
    float* p = params_[i].data();
    float* v = velocity_[i].data();
    const float* g = grads_[i];
    for (size_t j = 0; j < params_[i].size(); ++j) {
      v[j] = momentum * v[j] + g[j];
      p[j] -= lr * v[j];
    }
  }
}

}  // namespace chorus::ddp::trainer
