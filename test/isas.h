// What the kernel suites (test_reduce, test_kernel_elements) share: the datatypes and ops, and the CPU paths
// (ISAs) this machine can run, each forced in turn.
#pragma once

#include <vector>

#include "lib/kernels/reduce.h"

namespace chorus::test {

inline const chorusDataType_t kTypes[] = {chorusInt8,    chorusUint8,   chorusInt32,   chorusUint32, chorusInt64,
                                          chorusUint64,  chorusFloat16, chorusFloat32, chorusFloat64, chorusBfloat16};
inline const chorusRedOp_t kOps[] = {chorusSum, chorusProd, chorusMax, chorusMin, chorusAvg};

inline std::vector<const char*> availableIsas() {
  std::vector<const char*> v;
  for (const char* n : {"portable", "avx2", "avx512"})
    if (kernels::forceIsa(n)) v.push_back(n);
  kernels::forceIsa("auto");
  return v;
}

// Puts the automatic choice back when a test that forced ISAs ends.
struct IsaGuard {
  ~IsaGuard() { kernels::forceIsa("auto"); }
};

}  // namespace chorus::test
