// The CUDA device runtime (Note [Memory plugins], transports/plugin.h): pointers are classified by
// cudaPointerGetAttributes; the data work runs on one stream per device (the kernels of lib/kernels/cuda) and is
// waited for before returning, since the algorithms hand the bytes to a transport next.
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <deque>
#include <utility>
#include <vector>
#include <mutex>
#include <string>

#include "lib/base/immortal.h"
#include "lib/kernels/cuda/reduce_kernels.cuh"
#include "transports/cuda_ipc/cuda_error.h"
#include "transports/cuda_ipc/cuda_ipc.h"
#include "transports/cuda_ipc/cuda_stream.h"
#include "transports/plugin.h"

namespace chorus::transport::cuda {

namespace {

constexpr int kMaxDevices = 64;
std::mutex gMu;
std::array<cudaStream_t, kMaxDevices> gStreams{};

// The device's stream for the data work (non-blocking: it does not wait for the legacy default stream), created
// on first use; call with the device current.
cudaError_t streamOf(int device, cudaStream_t* stream) {
  if (device < 0 || device >= kMaxDevices) return cudaErrorInvalidDevice;
  std::lock_guard<std::mutex> g(gMu);
  cudaError_t e = cudaSuccess;
  if (gStreams[device] == nullptr) e = cudaStreamCreateWithFlags(&gStreams[device], cudaStreamNonBlocking);
  *stream = gStreams[device];
  return e;
}

// Runs `enqueue` on the device's stream and waits for it.
template <class F>
int run(int device, const char* what, F&& enqueue) {
  OnDevice on(device);
  cudaStream_t s = nullptr;
  cudaError_t e = on.error();
  if (e == cudaSuccess) e = streamOf(device, &s);
  if (e == cudaSuccess) e = enqueue(s);
  if (e == cudaSuccess) e = cudaStreamSynchronize(s);
  return e == cudaSuccess ? 0 : failed(e, fmt::format("cuda:{}: {}", device, what));
}

const char* unavailable() {
  static const Immortal<std::string> why{[] {
    int n = 0;  // left untouched when there is no driver
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) return std::string(cudaGetErrorString(e));
    return n == 0 ? std::string("no CUDA device") : std::string();
  }()};
  return why->c_str();
}

int classify(const void* p, int* device) {
  cudaPointerAttributes a{};
  cudaError_t e = cudaPointerGetAttributes(&a, p);
  if (e != cudaSuccess) return failed(e, fmt::format("cudaPointerGetAttributes({})", p));
  // Managed memory is the device's too: the kernels run on it. Pinned host memory is host memory.
  *device = a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged ? a.device : -1;
  return 0;
}

int currentDevice(int* device) {
  cudaError_t e = cudaGetDevice(device);
  return e == cudaSuccess ? 0 : failed(e, "cudaGetDevice");
}

int copy(int device, void* dst, const void* src, size_t bytes) {
  return run(device, "copy", [&](cudaStream_t s) { return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s); });
}

int reduce(int device, void* dst, const void* a, const void* b, size_t count, int dtype, int op) {
  return run(device, "reduce", [&](cudaStream_t s) {
    return kernels::gpu::reduce(dst, a, b, count, static_cast<chorusDataType_t>(dtype),
                                static_cast<chorusRedOp_t>(op), s);
  });
}

// More sources than one launch takes go in turns, the result so far first, so the order stays left to right.
int reduceN(int device, void* dst, const void* const* srcs, int n, size_t count, int dtype, int op) {
  return run(device, "reduceN", [&](cudaStream_t s) {
    const auto dt = static_cast<chorusDataType_t>(dtype);
    const auto o = static_cast<chorusRedOp_t>(op);
    int done = std::min(n, kernels::gpu::kCudaMaxSources);
    cudaError_t e = kernels::gpu::reduceN(dst, srcs, done, count, dt, o, s);
    while (e == cudaSuccess && done < n) {
      const void* next[kernels::gpu::kCudaMaxSources] = {dst};
      int k = 1;
      for (; k < kernels::gpu::kCudaMaxSources && done < n; ++k) next[k] = srcs[done++];
      e = kernels::gpu::reduceN(dst, next, k, count, dt, o, s);
    }
    return e;
  });
}

int scaleDivide(int device, void* buf, size_t count, int dtype, int divisor) {
  return run(device, "scaleDivide", [&](cudaStream_t s) {
    return kernels::gpu::scaleDivide(buf, count, static_cast<chorusDataType_t>(dtype), divisor, s);
  });
}

int allocate(int device, size_t bytes, void** p) {
  OnDevice on(device);
  cudaError_t e = on.error();
  if (e == cudaSuccess) e = cudaMalloc(p, bytes == 0 ? 1 : bytes);
  return e == cudaSuccess ? 0 : failed(e, fmt::format("cuda:{}: cudaMalloc of {} bytes", device, bytes));
}

// Staging's copies (Note [Staging device memory] in lib/comm/comm.cc): on a stream of their own per device, so
// that they overlap the data work; an event per copy, queried in order.
struct CopyQueue {
  std::mutex mu;
  cudaStream_t stream = nullptr;
  uint64_t started = 0;
  std::deque<std::pair<uint64_t, cudaEvent_t>> pending;  // oldest first
  std::vector<cudaEvent_t> spare;
};
Immortal<std::array<CopyQueue, kMaxDevices>> gCopies;  // Note [Immortal statics]

// Queues `enqueue` on the device's copy stream and records an event after it: the ticket's.
template <class F>
int startOnCopyStream(int device, const char* what, uint64_t* ticket, F&& enqueue) {
  if (device < 0 || device >= kMaxDevices) return failed(cudaErrorInvalidDevice, what);
  OnDevice on(device);
  cudaError_t e = on.error();
  if (e != cudaSuccess) return failed(e, fmt::format("cuda:{}: {}", device, what));
  CopyQueue& q = (*gCopies)[device];
  std::lock_guard<std::mutex> g(q.mu);
  if (q.stream == nullptr) e = cudaStreamCreateWithFlags(&q.stream, cudaStreamNonBlocking);
  cudaEvent_t ev = nullptr;
  if (e == cudaSuccess && !q.spare.empty()) {
    ev = q.spare.back();
    q.spare.pop_back();
  } else if (e == cudaSuccess) {
    e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  }
  if (e == cudaSuccess) e = enqueue(q.stream);
  if (e == cudaSuccess) e = cudaEventRecord(ev, q.stream);
  if (e != cudaSuccess) {
    if (ev != nullptr) q.spare.push_back(ev);
    return failed(e, fmt::format("cuda:{}: {}", device, what));
  }
  *ticket = ++q.started;
  q.pending.emplace_back(*ticket, ev);
  return 0;
}

int copyStart(int device, void* dst, const void* src, size_t bytes, uint64_t* ticket) {
  return startOnCopyStream(device, "starting a copy", ticket, [&](cudaStream_t s) {
    return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s);
  });
}

// A reduction reading a peer's buffer (Note [Device IPC]): on the copy stream, so it finishes in ticket order.
int reduceStart(int device, void* dst, const void* a, const void* b, size_t count, int dtype, int op,
                uint64_t* ticket) {
  return startOnCopyStream(device, "starting a reduction", ticket, [&](cudaStream_t s) {
    return kernels::gpu::reduce(dst, a, b, count, static_cast<chorusDataType_t>(dtype),
                                static_cast<chorusRedOp_t>(op), s);
  });
}

int copyDone(int device, uint64_t ticket, int* done) {
  if (device < 0 || device >= kMaxDevices) return failed(cudaErrorInvalidDevice, "copyDone");
  CopyQueue& q = (*gCopies)[device];
  std::lock_guard<std::mutex> g(q.mu);
  while (!q.pending.empty() && q.pending.front().first <= ticket) {
    const cudaError_t e = cudaEventQuery(q.pending.front().second);
    if (e == cudaErrorNotReady) {
      *done = 0;
      return 0;
    }
    if (e != cudaSuccess) return failed(e, fmt::format("cuda:{}: a copy", device));
    q.spare.push_back(q.pending.front().second);
    q.pending.pop_front();
  }
  *done = 1;
  return 0;
}

// On the staging device: with no device current, the runtime would make a context on GPU 0 for it.
int hostAllocate(int device, size_t bytes, void** p) {
  OnDevice on(device);
  cudaError_t e = on.error();
  if (e == cudaSuccess) e = cudaHostAlloc(p, bytes == 0 ? 1 : bytes, cudaHostAllocPortable);
  return e == cudaSuccess ? 0 : failed(e, fmt::format("cuda:{}: cudaHostAlloc of {} bytes", device, bytes));
}

int hostRelease(int device, void* p) {
  OnDevice on(device);
  cudaError_t e = on.error();
  if (e == cudaSuccess) e = cudaFreeHost(p);
  return e == cudaSuccess ? 0 : failed(e, fmt::format("cuda:{}: cudaFreeHost", device));
}

int release(int device, void* p) {
  OnDevice on(device);
  cudaError_t e = on.error();
  if (e == cudaSuccess) e = cudaFree(p);
  return e == cudaSuccess ? 0 : failed(e, fmt::format("cuda:{}: cudaFree", device));
}

}  // namespace

const chorusMemoryPlugin_v4_t* memoryTable() {
  static const chorusMemoryPlugin_v4_t t = {
      .version = CHORUS_MEMORY_PLUGIN_VERSION,
      .name = "cuda",
      .unavailable = unavailable,
      .lastError = lastError,
      .classify = classify,
      .currentDevice = currentDevice,
      .hostAccessible = [](int) { return 0; },
      .copy = copy,
      .reduce = reduce,
      .reduceN = reduceN,
      .scaleDivide = scaleDivide,
      .allocate = allocate,
      .release = release,
      .streamOpen = streamOpen,
      .streamFence = streamFence,
      .streamReached = streamReached,
      .streamRelease = streamRelease,
      .streamSynchronize = streamSynchronize,
      .streamClose = streamClose,
      .hostAllocate = hostAllocate,
      .hostRelease = hostRelease,
      .copyStart = copyStart,
      .copyDone = copyDone,
      .ipcExport = ipcExport,
      .ipcOpen = ipcOpen,
      .ipcClose = ipcClose,
      .reduceStart = reduceStart,
      .deviceCount = deviceCount,
      .deviceId = deviceId,
      .peerAccess = peerAccess,
  };
  return &t;
}

}  // namespace chorus::transport::cuda
