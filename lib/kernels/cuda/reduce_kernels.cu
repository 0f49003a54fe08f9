// The CUDA reduction kernels: one grid-stride kernel per (datatype, op, access), the arithmetic from element.h.
#include "lib/kernels/cuda/reduce_kernels.cuh"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "lib/kernels/element.h"

namespace chorus::kernels::gpu {
namespace {

constexpr unsigned kThreads = 256;
constexpr unsigned kMaxBlocks = 4096;  // a few waves of resident blocks on any current GPU; grid-stride beyond
constexpr size_t kVec = 16;

struct Sources {  // passed by value: a kernel parameter
  const unsigned char* p[kCudaMaxSources];
  int n;
};

// An element range as `head` elements up to the pointers' first 16-byte boundary, `nvec` 16-byte vectors, then
// element by element to `count`. No vectors (head == count) where the pointers are unequally aligned.
struct Split {
  size_t head, nvec, count;
};

// kBytes: some pointer is not element-aligned, so elements are read and written byte by byte.
template <class S, bool kBytes>
__device__ S loadElem(const unsigned char* p) {
  if constexpr (kBytes) {
    S s;
    memcpy(&s, p, sizeof s);
    return s;
  } else {
    return *reinterpret_cast<const S*>(p);
  }
}
template <class S, bool kBytes>
__device__ void storeElem(unsigned char* p, S s) {
  if constexpr (kBytes) memcpy(p, &s, sizeof s);
  else *reinterpret_cast<S*>(p) = s;
}

// dst = src[0] op src[1] op ... (kScale: dst = src[0] / divisor). Every thread reads all of its elements before
// writing them, and threads share no element: dst may be any source.
template <chorusDataType_t D, chorusRedOp_t Op, bool kScale, bool kBytes>
__global__ void __launch_bounds__(kThreads) elementwise(unsigned char* dst, Sources src, Split sp, int divisor) {
  using S = elem::Storage<D>;
  constexpr size_t kPer = kVec / sizeof(S);
  auto combine = [&](S acc, size_t at) {
    if constexpr (kScale) {
      return elem::scale<D>(acc, divisor);
    } else {
#pragma unroll
      for (int s = 1; s < kCudaMaxSources; ++s)
        if (s < src.n) acc = elem::apply<D, Op>(acc, loadElem<S, kBytes>(src.p[s] + at));
      return acc;
    }
  };
  const size_t tid = size_t(blockIdx.x) * blockDim.x + threadIdx.x, stride = size_t(gridDim.x) * blockDim.x;
  if constexpr (!kBytes) {
    const size_t base = sp.head * sizeof(S);
    for (size_t v = tid; v < sp.nvec; v += stride) {
      const size_t at = base + v * kVec;
      S acc[kPer];
      const uint4 first = *reinterpret_cast<const uint4*>(src.p[0] + at);
      memcpy(acc, &first, kVec);
      if constexpr (kScale) {
#pragma unroll
        for (size_t k = 0; k < kPer; ++k) acc[k] = elem::scale<D>(acc[k], divisor);
      } else {
#pragma unroll
        for (int s = 1; s < kCudaMaxSources; ++s) {
          if (s >= src.n) break;
          const uint4 u = *reinterpret_cast<const uint4*>(src.p[s] + at);
          S x[kPer];
          memcpy(x, &u, kVec);
#pragma unroll
          for (size_t k = 0; k < kPer; ++k) acc[k] = elem::apply<D, Op>(acc[k], x[k]);
        }
      }
      uint4 out;
      memcpy(&out, acc, kVec);
      *reinterpret_cast<uint4*>(dst + at) = out;
    }
  }
  // The head and the tail as one index range.
  const size_t tail = sp.head + sp.nvec * kPer, scalars = sp.head + (sp.count - tail);
  for (size_t j = tid; j < scalars; j += stride) {
    const size_t at = (j < sp.head ? j : tail + (j - sp.head)) * sizeof(S);
    storeElem<S, kBytes>(dst + at, combine(loadElem<S, kBytes>(src.p[0] + at), at));
  }
}

template <chorusDataType_t D, chorusRedOp_t Op, bool kScale>
cudaError_t launch(unsigned char* dst, const Sources& src, size_t count, int divisor, cudaStream_t stream) {
  using S = elem::Storage<D>;
  const uintptr_t d = reinterpret_cast<uintptr_t>(dst);
  bool bytes = d % sizeof(S) != 0, vec = true;
  for (int s = 0; s < src.n; ++s) {
    const uintptr_t p = reinterpret_cast<uintptr_t>(src.p[s]);
    bytes |= p % sizeof(S) != 0;
    vec &= p % kVec == d % kVec;
  }
  Split sp{count, 0, count};
  if (vec && !bytes) {
    sp.head = std::min(count, (kVec - d % kVec) % kVec / sizeof(S));
    sp.nvec = (count - sp.head) / (kVec / sizeof(S));
  }
  const size_t work = std::max(sp.nvec, sp.count - sp.nvec * (kVec / sizeof(S)));
  const unsigned blocks = unsigned(std::min<size_t>(kMaxBlocks, (work + kThreads - 1) / kThreads));
  if (blocks == 0) return cudaSuccess;  // nothing to do: a grid of no blocks is a launch error
  // cudaLaunchKernel says how the launch went itself. A launch with <<<>>> must be followed by cudaGetLastError,
  // which would also take (and clear) an error of the application's own launches that it has not looked at yet.
  void* args[] = {&dst, const_cast<Sources*>(&src), &sp, &divisor};
  const void* kernel = bytes ? reinterpret_cast<const void*>(&elementwise<D, Op, kScale, true>)
                             : reinterpret_cast<const void*>(&elementwise<D, Op, kScale, false>);
  return cudaLaunchKernel(kernel, dim3(blocks), dim3(kThreads), args, 0, stream);
}


cudaError_t reduceSources(void* dst, const Sources& src, size_t count, chorusDataType_t dt, chorusRedOp_t op,
                          cudaStream_t stream) {
  auto* d = static_cast<unsigned char*>(dst);
  return elem::withType(dt, [&](auto tag) {
    constexpr chorusDataType_t D = decltype(tag)::value;
    switch (op) {
      case chorusSum: case chorusAvg: return launch<D, chorusSum, false>(d, src, count, 0, stream);
      case chorusProd: return launch<D, chorusProd, false>(d, src, count, 0, stream);
      case chorusMax: return launch<D, chorusMax, false>(d, src, count, 0, stream);
      case chorusMin: return launch<D, chorusMin, false>(d, src, count, 0, stream);
      case chorusBand: case chorusBor: case chorusBxor:
        if constexpr (elem::kInteger<D>) {
          if (op == chorusBand) return launch<D, chorusBand, false>(d, src, count, 0, stream);
          if (op == chorusBor) return launch<D, chorusBor, false>(d, src, count, 0, stream);
          return launch<D, chorusBxor, false>(d, src, count, 0, stream);
        }
        break;  // floating-point datatypes have no bitwise ops
      default: break;
    }
    return cudaErrorInvalidValue;
  }, cudaErrorInvalidValue);
}

bool validOp(chorusRedOp_t op) { return int(op) >= int(chorusSum) && int(op) < int(chorusNumOps); }
bool validType(chorusDataType_t dt) { return int(dt) >= int(chorusInt8) && int(dt) <= int(chorusBfloat16); }

}  // namespace

cudaError_t reduce(void* dst, const void* a, const void* b, size_t count, chorusDataType_t dt, chorusRedOp_t op,
                   cudaStream_t stream) {
  const void* srcs[] = {a, b};
  return reduceN(dst, srcs, 2, count, dt, op, stream);
}

cudaError_t reduceN(void* dst, const void* const* srcs, int n, size_t count, chorusDataType_t dt, chorusRedOp_t op,
                    cudaStream_t stream) {
  if (n < 1 || n > kCudaMaxSources || !validOp(op) || !validType(dt)) return cudaErrorInvalidValue;
  if (count == 0) return cudaSuccess;
  if (!dst || !srcs) return cudaErrorInvalidValue;
  Sources src{};
  src.n = n;
  for (int s = 0; s < n; ++s) {
    if (!srcs[s]) return cudaErrorInvalidValue;
    src.p[s] = static_cast<const unsigned char*>(srcs[s]);
  }
  if (n == 1) {
    return elem::withType(dt, [&](auto tag) {
      if (dst == srcs[0]) return cudaSuccess;
      return cudaMemcpyAsync(dst, srcs[0], count * sizeof(elem::Storage<decltype(tag)::value>),
                             cudaMemcpyDeviceToDevice, stream);
    }, cudaErrorInvalidValue);
  }
  return reduceSources(dst, src, count, dt, op, stream);
}

cudaError_t scaleDivide(void* buf, size_t count, chorusDataType_t dt, int divisor, cudaStream_t stream) {
  if (!validType(dt)) return cudaErrorInvalidValue;
  if (count == 0 || divisor == 0) return cudaSuccess;
  if (!buf) return cudaErrorInvalidValue;
  Sources src{};
  src.n = 1;
  src.p[0] = static_cast<const unsigned char*>(buf);
  auto* d = static_cast<unsigned char*>(buf);
  return elem::withType(dt, [&](auto tag) {
    return launch<decltype(tag)::value, chorusSum, true>(d, src, count, divisor, stream);
  }, cudaErrorInvalidValue);
}

}  // namespace chorus::kernels::gpu
