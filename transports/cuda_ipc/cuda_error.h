// What the CUDA plugin's files share: the error text (per thread, as lastError() of the memory table reads it),
// a scope on a device, and the driver's entry points.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <string>

#include "chorus/chorus.h"
#include "lib/base/error.h"

namespace chorus::transport::cuda {

// Usable at exit (Note [Immortal statics]): setError() writes it, lastError() reads it.
inline thread_local std::string* tError = nullptr;
inline void setError(const std::string& text) { keepThreadText(tError, text); }
inline const char* lastError() { return tError != nullptr ? tError->c_str() : ""; }

// Records "what: CUDA's text (its name)" and returns chorusUnhandledCudaError.
inline int failed(cudaError_t e, const std::string& what) {
  setError(fmt::format("{}: {} ({})", what, cudaGetErrorString(e), cudaGetErrorName(e)));
  return chorusUnhandledCudaError;
}

// The driver's function `name` (its CUDA 12 ABI) through the runtime, so that the plugin links no libcuda; nullptr
// where the driver has none.
template <typename Fn>
Fn driverEntryPoint(const char* name) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess)
    return nullptr;
  return reinterpret_cast<Fn>(p);
}

// Makes `device` current for the scope. A thread that had a context of another device (an application's: a
// blocking call, a fence) gets it back after. A thread with none (Chorus's own, or an application's before its
// first CUDA call) keeps `device`: cudaGetDevice says 0 there, and setting 0 back would make a context on GPU 0,
// several hundred MB, for every rank of another GPU.
class OnDevice {
 public:
  explicit OnDevice(int device) {
    using GetCurrent = CUresult (*)(CUcontext*);
    static const GetCurrent getCurrent = driverEntryPoint<GetCurrent>("cuCtxGetCurrent");
    CUcontext ctx = nullptr;
    const bool hasContext = getCurrent == nullptr || getCurrent(&ctx) != CUDA_SUCCESS || ctx != nullptr;
    e_ = cudaGetDevice(&saved_);
    if (e_ == cudaSuccess && saved_ != device) e_ = cudaSetDevice(device);
    else saved_ = -1;
    if (!hasContext) saved_ = -1;
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
