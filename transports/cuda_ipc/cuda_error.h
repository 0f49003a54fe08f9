// What the CUDA plugin's files share: the error text (per thread, as lastError() of the memory table reads it)
// and a scope on a device.
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

// Makes `device` current for the scope, and restores the thread's own device after: the plugin runs on the
// application's threads (a blocking call, a fence), whose current device is their business.
class OnDevice {
 public:
  explicit OnDevice(int device) {
    e_ = cudaGetDevice(&saved_);
    if (e_ == cudaSuccess && saved_ != device) e_ = cudaSetDevice(device);
    else saved_ = -1;
  }
  ~OnDevice() {
    if (saved_ >= 0) cudaSetDevice(saved_);
  }
  OnDevice(const OnDevice&) = delete;
  OnDevice& operator=(const OnDevice&) = delete;
  cudaError_t error() const { return e_; }

 private:
  int saved_ = -1;
  cudaError_t e_;
};

}  // namespace chorus::transport::cuda
