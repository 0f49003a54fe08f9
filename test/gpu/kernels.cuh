// Kernels the GPU tests queue around a collective on one CUDA stream: one that takes a while and then writes the
// input, one that reads the output.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace chorus::test::gpu {

// Spins about `ms` milliseconds on the device, then writes p[i] = base + i % 7.
cudaError_t spinThenFill(cudaStream_t stream, float* p, size_t n, float base, int ms);
// dst[i] = src[i].
cudaError_t copyOut(cudaStream_t stream, const float* src, float* dst, size_t n);

}  // namespace chorus::test::gpu
