// A GPU's memory as the CUDA tests handle it: cudaMalloc, cudaMemcpy, errors thrown with CUDA's text.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "test/space_matrix.h"

namespace chorus::test {

inline void ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

class CudaMemory final : public TestMemory {
 public:
  void* allocate(size_t bytes) override {
    void* p = nullptr;
    ok(cudaMalloc(&p, bytes == 0 ? 1 : bytes), "cudaMalloc");
    return p;
  }
  void release(void* p) override { cudaFree(p); }
  void copy(void* dst, const void* src, size_t bytes) override {
    ok(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault), "cudaMemcpy");
  }
};

}  // namespace chorus::test
