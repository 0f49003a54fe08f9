// The GPU's own copy rate, the ceiling an allreduce over device memory is measured against (scripts/gpu-check.sh):
// cudaMemcpyAsync device to device, bytes read plus written per second, as the bound's arithmetic counts them.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

namespace {

void ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "d2d_copy: %s: %s\n", what, cudaGetErrorString(e));
  std::exit(1);
}

}  // namespace

int main() {
  std::printf("# d2d_copy: cudaMemcpyAsync device to device; GB/s counts bytes read plus written\n");
  std::printf("# %12s %10s %12s\n", "bytes", "time(us)", "GB/s(r+w)");
  for (size_t bytes : {size_t(1) << 20, size_t(16) << 20, size_t(256) << 20, size_t(1) << 30}) {
    void *a = nullptr, *b = nullptr;
    ok(cudaMalloc(&a, bytes), "cudaMalloc");
    ok(cudaMalloc(&b, bytes), "cudaMalloc");
    cudaEvent_t start, stop;
    ok(cudaEventCreate(&start), "cudaEventCreate");
    ok(cudaEventCreate(&stop), "cudaEventCreate");
    const int iters = bytes >= (size_t(256) << 20) ? 20 : 200;
    for (int i = 0; i < 3; ++i) ok(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, nullptr), "warm-up copy");
    ok(cudaEventRecord(start, nullptr), "cudaEventRecord");
    for (int i = 0; i < iters; ++i) ok(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, nullptr), "copy");
    ok(cudaEventRecord(stop, nullptr), "cudaEventRecord");
    ok(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    ok(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    const double us = ms * 1e3 / iters;
    std::printf("  %12zu %10.1f %12.1f\n", bytes, us, 2.0 * static_cast<double>(bytes) / (us * 1e3));
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    cudaFree(a);
    cudaFree(b);
  }
  return 0;
}
