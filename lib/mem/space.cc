#include "lib/mem/space.h"

#include <atomic>

namespace chorus::mem {

namespace {
std::atomic<Classifier*> gClassifier{nullptr};
}

void Space::reduceN(void* dst, const void* const* srcs, int n, size_t count, chorusDataType_t dt,
                    chorusRedOp_t op) const {
  if (dev_ != nullptr) return dev_->reduceN(dst, srcs, n, count, dt, op);
  if (n == 1) return copy(dst, srcs[0], count * kernels::dataTypeSize(dt));
  kernels::reduce(dst, srcs[0], srcs[1], count, dt, op);
  for (int i = 2; i < n; ++i) kernels::reduce(dst, dst, srcs[i], count, dt, op);
}

void setClassifier(Classifier* c) { gClassifier.store(c, std::memory_order_release); }

Space classify(const void* p) {
  Classifier* c = gClassifier.load(std::memory_order_acquire);
  return Space(c != nullptr && p != nullptr ? c->deviceOf(p) : nullptr);
}

Space currentSpace() {
  Classifier* c = gClassifier.load(std::memory_order_acquire);
  return Space(c != nullptr ? c->current() : nullptr);
}

}  // namespace chorus::mem
