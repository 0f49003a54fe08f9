// A small multi-layer perceptron with hand-written forward/backward, SGD with momentum, and a synthetic data
// set: the model the data-parallel layer (ddp/) trains. It is plain C++ on purpose, so that every result is
// bit-for-bit reproducible (fixed loop orders, no threads, no BLAS) and a data-parallel run can be compared
// exactly against a single-process one. Gradients can live in caller-owned memory (setGradStorage) and
// backward reports each parameter the moment its gradient is final, which is what lets the caller overlap
// gradient communication with the rest of backward.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace chorus::ddp::trainer {

// Points drawn around `classes` random centres in `features` dimensions (centres uniform in [-1, 1], noise
// per coordinate a sum of four uniforms, standard deviation about 0.58), labels uniform. Generated with
// integer arithmetic only (splitmix64), then scaled by a power of two, so the same arguments give
// bit-identical data on every run, compiler and machine.
struct Dataset {
  int features = 0, classes = 0;
  std::vector<float> x;  // samples x features, row-major
  std::vector<int> y;    // labels in [0, classes)
  size_t size() const { return y.size(); }
};
Dataset makeDataset(uint64_t seed, size_t samples, int features, int classes);

// Parameters are numbered in registration (forward) order: param 2*l is layer l's weight (out x in,
// row-major), 2*l+1 its bias (out); with a branch, the last two params are the branch's weight and bias.
class Mlp {
 public:
  // dims = {in, hidden..., out}: layer l maps dims[l] -> dims[l+1], ReLU between layers, none after the last.
  // branch: an extra Linear(dims.front() -> dims.back()) whose output is added to the logits when used.
  // Weights and biases uniform(-1/sqrt(in), 1/sqrt(in)) from one splitmix64 stream seeded by `seed`, drawn in
  // parameter order, so the main layers are the same with and without a branch.
  // Throws std::invalid_argument on fewer than two dims or a dim < 1.
  Mlp(const std::vector<int>& dims, uint64_t seed, bool branch);
  int numParams() const;
  int numLayers() const;  // main layers, without the branch
  bool hasBranch() const;
  float* param(int i);  // parameter storage (owned by Mlp); i out of range throws std::out_of_range
  size_t paramCount(int i) const;  // elements
  float* grad(int i);              // where param i's gradient is accumulated
  // Moves param i's gradient storage to caller-owned memory of paramCount(i) floats (e.g. inside a
  // communication bucket); the current gradient values are copied there first. Passing nullptr returns to
  // Mlp-owned storage (again copying the values). The caller's memory must outlive its use here.
  void setGradStorage(int i, float* storage);
  void zeroGrad();  // all gradients := 0 (wherever they are stored)

  // Loss = sum_i w[i] * cross_entropy(softmax(logits_i), y[i]) over n samples (x: n x dims.front()).
  // w lets a caller weight samples (1/n for a mean; 0 to leave a sample out). Caches what backward needs.
  // Throws std::invalid_argument on a label outside [0, dims.back()), or a null pointer with n > 0.
  float forward(const float* x, const int* y, const float* w, size_t n, bool useBranch);
  // Back-propagates the last forward's loss, ADDING (+=) to the gradients (so gradients accumulate over
  // several forward/backward pairs until zeroGrad, like PyTorch's .grad). Calls ready(param) once for every
  // parameter as soon as its gradient is complete, in backward order: the branch's weight and bias first
  // (when used), then layer L-1's weight and bias, ..., then layer 0's weight and bias. After ready(p),
  // backward neither reads nor writes grad(p) again, so the caller may start communicating it at once.
  // Parameters of an unused branch get no gradient and no ready() call. With n == 0 nothing is added but
  // ready() is still called for every used parameter. Calling it again without a new forward adds the same
  // gradients again. Throws std::logic_error before any forward.
  void backward(const std::function<void(int param)>& ready);
  // SGD with momentum (PyTorch's formula): v = momentum * v + g; p -= lr * v, for every parameter. A
  // parameter whose gradient was never written since construction still takes the step with g = its current
  // gradient (which is zero).
  void sgdStep(float lr, float momentum);

 private:
  std::vector<int> dims_;
  bool branch_ = false;
  std::vector<std::vector<float>> params_, ownGrads_, velocity_;
  std::vector<float*> grads_;  // each points into ownGrads_ or into caller memory

  // What the last forward left for backward.
  bool haveForward_ = false, usedBranch_ = false;
  size_t n_ = 0;
  std::vector<std::vector<float>> acts_;  // acts_[l]: input of layer l (n x dims[l]); acts_[0] is x
  std::vector<float> dlogits_;            // d loss / d logits (n x dims.back())

  std::vector<float> dz_, da_;  // reused so that steady-state steps allocate nothing
};

}  // namespace chorus::ddp::trainer
