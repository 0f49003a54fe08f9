// The CUDA plugin's error text: per thread, as lastError() of the memory table reads it.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "chorus/chorus.h"
#include "lib/base/error.h"

namespace chorus::transport::cuda {

inline thread_local std::string tError;

// Records "what: CUDA's text (its name)" and returns chorusUnhandledCudaError.
inline int failed(cudaError_t e, const std::string& what) {
  tError = fmt::format("{}: {} ({})", what, cudaGetErrorString(e), cudaGetErrorName(e));
  return chorusUnhandledCudaError;
}

}  // namespace chorus::transport::cuda
