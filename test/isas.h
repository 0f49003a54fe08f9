// What the kernel suites (test_reduce, test_kernel_elements) share: the datatypes and ops, and the CPU paths
// (ISAs) this machine can run, each forced in turn.
#pragma once

#include <utility>
#include <vector>

#include "lib/kernels/reduce.h"

namespace chorus::test {

inline const chorusDataType_t kTypes[] = {chorusInt8,    chorusUint8,   chorusInt32,   chorusUint32, chorusInt64,
                                          chorusUint64,  chorusFloat16, chorusFloat32, chorusFloat64, chorusBfloat16};
inline const chorusRedOp_t kOps[] = {chorusSum, chorusProd, chorusMax, chorusMin, chorusAvg,
                                     chorusBand, chorusBor, chorusBxor};

// Every (datatype, op) the kernels compute (kernels::opApplies: the bitwise ops on integers only).
inline std::vector<std::pair<chorusDataType_t, chorusRedOp_t>> typeOpPairs() {
  std::vector<std::pair<chorusDataType_t, chorusRedOp_t>> v;
  for (chorusDataType_t dt : kTypes)
    for (chorusRedOp_t op : kOps)
      if (kernels::opApplies(op, dt)) v.emplace_back(dt, op);
  return v;
}

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
