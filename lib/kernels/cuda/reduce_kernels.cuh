// CUDA reduction kernels: bit for bit what kernels::reduce and kernels::scaleDivide give on the CPU, through the
// arithmetic both share (lib/kernels/element.h). Built only where CUDA is, never into libchorus itself; must not be
// compiled with -ftz=true or --use_fast_math (float32 subnormals are kept, as on the CPU).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "chorus/chorus.h"

namespace chorus::kernels::gpu {

constexpr int kCudaMaxSources = 8;

// All three enqueue on stream and return the launch's error (cudaErrorInvalidValue for an invalid dt, op, n or
// null pointer with count > 0, and for a bitwise op of a floating-point dt). Pointers are device memory, any alignment: 16-byte vector loads and stores where
// all of a call's pointers sit equally far from a 16-byte boundary, element by element otherwise. count == 0
// enqueues nothing.

// dst[i] = a[i] op b[i] for i < count. dst may alias a or b exactly. chorusAvg reduces as chorusSum.
cudaError_t reduce(void* dst, const void* a, const void* b, size_t count, chorusDataType_t dt,
                               chorusRedOp_t op, cudaStream_t stream);

// dst[i] = srcs[0][i] op srcs[1][i] op ... op srcs[n-1][i], combined left to right and stored as dt after each step
// (what n - 1 chained reduce calls give); 1 <= n <= kCudaMaxSources; n == 1 copies. dst may alias any source exactly.
cudaError_t reduceN(void* dst, const void* const* srcs, int n, size_t count, chorusDataType_t dt,
                                 chorusRedOp_t op, cudaStream_t stream);

// buf[i] = buf[i] / divisor (Avg's final step), as scaleDivide. divisor == 0 enqueues nothing.
cudaError_t scaleDivide(void* buf, size_t count, chorusDataType_t dt, int divisor, cudaStream_t stream);

}  // namespace chorus::kernels::gpu
