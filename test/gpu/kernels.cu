#include "test/gpu/kernels.cuh"

namespace chorus::test::gpu {

namespace {

__global__ void spinThenFillKernel(float* p, size_t n, float base, long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = base + static_cast<float>(i % 7);
}

__global__ void copyOutKernel(const float* src, float* dst, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

}  // namespace

cudaError_t spinThenFill(cudaStream_t stream, float* p, size_t n, float base, int ms) {
  int device = 0, kHz = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&kHz, cudaDevAttrClockRate, device);
  if (e != cudaSuccess) return e;
  spinThenFillKernel<<<4, 256, 0, stream>>>(p, n, base, static_cast<long long>(kHz) * ms);
  return cudaGetLastError();
}

cudaError_t copyOut(cudaStream_t stream, const float* src, float* dst, size_t n) {
  copyOutKernel<<<16, 256, 0, stream>>>(src, dst, n);
  return cudaGetLastError();
}

}  // namespace chorus::test::gpu
