// Unused-parameter tracking for findUnusedParameters (seed 000 §17.33, seed 002 §4.2).
//
// Note [Unused parameters]: a parameter is locally used when some forward of the current accumulation window
// (the no_sync backward passes plus the synchronised one that ends it) used it. At the end of a synchronised
// backward the local flags are summed over the ranks in an int32 AllReduce of their own (not inside a gradient
// bucket: a bucket holds one floating-point type). A parameter no rank used keeps its gradient untouched; one
// that some ranks used gets (sum of the users' gradients) / world size, the others contributing zeros.
#pragma once

#include <cstdint>
#include <vector>

namespace chorus::ddp {

class UsedTracker {
 public:
  void reset(int nparams) {
    local_.assign(static_cast<size_t>(nparams), 0);
    global_.assign(static_cast<size_t>(nparams), 0);
  }
  void markUsed(int p) { local_[static_cast<size_t>(p)] = 1; }
  bool locallyUsed(int p) const { return local_[static_cast<size_t>(p)] != 0; }
  // The AllReduce's buffer: filled with the local flags, summed in place by the caller's collective.
  int32_t* globalCounts() {
    for (size_t i = 0; i < local_.size(); ++i) global_[i] = local_[i];
    return global_.data();
  }
  // Zeros for a rank that contributes nothing (a joined rank).
  int32_t* zeroCounts() {
    global_.assign(global_.size(), 0);
    return global_.data();
  }
  bool globallyUsed(int p) const { return global_[static_cast<size_t>(p)] != 0; }
  size_t size() const { return local_.size(); }
  void endWindow() { local_.assign(local_.size(), 0); }

 private:
  std::vector<int32_t> local_, global_;
};

}  // namespace chorus::ddp
