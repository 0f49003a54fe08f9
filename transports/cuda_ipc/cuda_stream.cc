// A fence on an application's CUDA stream (Note [Device streams], lib/comm/stream.cc): a CUDA event the host polls
// for "the work queued before is done", then a wait that holds the stream until the host writes the fence's number
// into a host-mapped flag: a stream memory operation (cuStreamWaitValue32) where the driver has them, else a host
// function that waits for the flag (CHORUS_CUDA_STREAM_WAIT=memop|hostfn chooses, for measuring). Numbers grow by
// one per fence and the wait compares cyclically (CU_STREAM_WAIT_VALUE_GEQ), so 32 bits never wrap wrongly.
#include "transports/cuda_ipc/cuda_stream.h"

#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "lib/base/immortal.h"
#include "transports/cuda_ipc/cuda_error.h"

namespace chorus::transport::cuda {

namespace {

using WaitValue32 = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

// The driver's cuStreamWaitValue32, or nullptr: then, as with CHORUS_CUDA_STREAM_WAIT=hostfn, a host function
// waits.
WaitValue32 waitValue32() {
  static const WaitValue32 fn = []() -> WaitValue32 {
    const char* mode = std::getenv("CHORUS_CUDA_STREAM_WAIT");
    if (mode != nullptr && std::strcmp(mode, "hostfn") == 0) return nullptr;
    return driverEntryPoint<WaitValue32>("cuStreamWaitValue32");
  }();
  return fn;
}

bool reachedCyclic(uint32_t now, uint32_t wanted) { return static_cast<int32_t>(now - wanted) >= 0; }

// The flags of closed streams, kept for the next stream and never freed: cudaFreeHost waits for every stream of the
// device, and a stream may close while a fence of another is held (Note [Frees wait for quiet] in
// transports/plugin_memory.cc). Four bytes of pinned memory per stream open at once.
std::mutex gFlagsMu;
Immortal<std::vector<uint32_t*>> gSpareFlags;  // Note [Immortal statics]

cudaError_t takeFlag(uint32_t** flag) {
  {
    std::lock_guard<std::mutex> g(gFlagsMu);
    if (!gSpareFlags->empty()) {
      *flag = gSpareFlags->back();
      gSpareFlags->pop_back();
      return cudaSuccess;
    }
  }
  return cudaHostAlloc(flag, sizeof(uint32_t), cudaHostAllocMapped | cudaHostAllocPortable);
}

// Its stream has passed every wait on it (released and synchronized), so nothing reads it any more.
void keepFlag(uint32_t* flag) {
  std::lock_guard<std::mutex> g(gFlagsMu);
  gSpareFlags->push_back(flag);
}

struct Stream {
  cudaStream_t native;
  int device;
  uint32_t* flag = nullptr;  // host-mapped: the number of the last fence released
  CUdeviceptr deviceFlag = 0;
  WaitValue32 wait = nullptr;  // nullptr: a host function waits
  std::mutex mu;
  uint64_t made = 0;                                     // fences made
  std::deque<std::pair<uint64_t, cudaEvent_t>> pending;  // not released yet, oldest first
  std::deque<cudaEvent_t> spare;                         // events to reuse

  void store(uint64_t fence) { __atomic_store_n(flag, static_cast<uint32_t>(fence), __ATOMIC_RELEASE); }
};

struct HostWait {
  const uint32_t* flag;
  uint32_t fence;
};

// Runs on CUDA's host-function thread, holding the stream (and only host functions behind it) until released.
void CUDART_CB hostWait(void* arg) {
  auto* w = static_cast<HostWait*>(arg);
  auto nap = std::chrono::microseconds(1);
  while (!reachedCyclic(__atomic_load_n(w->flag, __ATOMIC_ACQUIRE), w->fence)) {
    std::this_thread::sleep_for(nap);
    nap = std::min(nap * 2, std::chrono::microseconds(100));
  }
  delete w;
}

}  // namespace

// Note [One hardware queue]:
// A fence holds the application's stream with a wait the GPU's scheduler cannot see through (a stream memory
// operation, or a host function), and Chorus's own streams then do the call's device work before the host releases
// it. With CUDA_DEVICE_MAX_CONNECTIONS=1 (Megatron-LM and Transformer Engine set it) every stream of the device goes
// through one hardware queue, so the held wait blocks Chorus's copies behind it and the worker waits for them
// forever. Doing the work on the application's stream instead would need the host to run the algorithm before the
// call returns (a blocking call), and a host function that waits breaks cudaLaunchHostFunc's rule besides. So
// chorusStreamCreateFromCuda refuses the setting, naming it; blocking calls (no stream) still work under it. With
// more connections (8 by default) streams share queues only when there are more of them than queues; whether the
// held wait then blocks a sharing stream is for a GPU to show (issue 39).
int streamOpen(void* native, int* device, void** out) {
  if (const char* c = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS"); c != nullptr && std::atoi(c) == 1) {
    setError("CUDA_DEVICE_MAX_CONNECTIONS=1 puts every stream of the device in one hardware queue, where the wait "
             "that holds this stream until Chorus's call is done would also block Chorus's own copies: a hang. "
             "Unset it for Chorus's CUDA streams, or call Chorus without a stream (blocking) "
             "(Note [One hardware queue] in transports/cuda_ipc/cuda_stream.cc)");
    return chorusInvalidUsage;
  }
  auto* s = new Stream{};
  s->native = static_cast<cudaStream_t>(native);
  cudaError_t e = cudaStreamGetDevice(s->native, &s->device);
  if (e != cudaSuccess) {
    delete s;
    return failed(e, fmt::format("cudaStreamGetDevice({})", native));
  }
  OnDevice on(s->device);
  e = on.error();
  if (e == cudaSuccess) e = takeFlag(&s->flag);
  if (e == cudaSuccess) {
    *s->flag = 0;
    void* d = nullptr;
    e = cudaHostGetDevicePointer(&d, s->flag, 0);
    s->deviceFlag = reinterpret_cast<CUdeviceptr>(d);
  }
  if (e != cudaSuccess) {
    if (s->flag != nullptr) keepFlag(s->flag);
    const int device = s->device;
    delete s;
    return failed(e, fmt::format("cuda:{}: a host-mapped flag for stream {}", device, native));
  }
  s->wait = waitValue32();
  *device = s->device;
  *out = s;
  return 0;
}

int streamFence(void* stream, uint64_t* fence) {
  auto* s = static_cast<Stream*>(stream);
  OnDevice on(s->device);
  std::lock_guard<std::mutex> g(s->mu);
  cudaError_t e = on.error();
  // A graph replays what was captured without Chorus's host side: the fence would never be released again.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (e == cudaSuccess) e = cudaStreamIsCapturing(s->native, &capture);
  if (e == cudaSuccess && capture != cudaStreamCaptureStatusNone) {
    setError(fmt::format("cuda:{}: stream {} is being captured into a CUDA graph (cudaStreamBeginCapture), and a "
                         "Chorus call cannot be captured: issue it outside the capture", s->device,
                         static_cast<void*>(s->native)));
    return chorusInvalidUsage;
  }
  cudaEvent_t ev = nullptr;
  if (e == cudaSuccess && !s->spare.empty()) {
    ev = s->spare.front();
    s->spare.pop_front();
  } else if (e == cudaSuccess) {
    e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  }
  if (e == cudaSuccess) e = cudaEventRecord(ev, s->native);
  const uint64_t id = s->made + 1;
  if (e == cudaSuccess && s->wait != nullptr) {
    const CUresult r = s->wait(s->native, s->deviceFlag, static_cast<cuuint32_t>(id), CU_STREAM_WAIT_VALUE_GEQ);
    if (r == CUDA_ERROR_NOT_SUPPORTED) {
      s->wait = nullptr;  // this device has no stream memory operations
    } else if (r != CUDA_SUCCESS) {
      s->spare.push_back(ev);
      setError(fmt::format("cuda:{}: cuStreamWaitValue32 on stream {} failed: CUresult {}", s->device,
                           static_cast<void*>(s->native), static_cast<int>(r)));
      return chorusUnhandledCudaError;
    }
  }
  if (e == cudaSuccess && s->wait == nullptr)
    e = cudaLaunchHostFunc(s->native, hostWait, new HostWait{s->flag, static_cast<uint32_t>(id)});
  if (e != cudaSuccess) {
    if (ev != nullptr) s->spare.push_back(ev);
    return failed(e, fmt::format("cuda:{}: queueing a fence on stream {}", s->device,
                                 static_cast<void*>(s->native)));
  }
  s->made = id;
  s->pending.emplace_back(id, ev);
  *fence = id;
  return 0;
}

int streamReached(void* stream, uint64_t fence, int* reached) {
  auto* s = static_cast<Stream*>(stream);
  cudaEvent_t ev = nullptr;
  {
    std::lock_guard<std::mutex> g(s->mu);
    for (const auto& [id, e] : s->pending)
      if (id == fence) ev = e;
  }
  if (ev == nullptr) {  // released already
    *reached = 1;
    return 0;
  }
  const cudaError_t e = cudaEventQuery(ev);
  if (e == cudaErrorNotReady) {
    *reached = 0;
    return 0;
  }
  if (e != cudaSuccess) return failed(e, fmt::format("cuda:{}: cudaEventQuery", s->device));
  *reached = 1;
  return 0;
}

int streamRelease(void* stream, uint64_t fence) {
  auto* s = static_cast<Stream*>(stream);
  std::lock_guard<std::mutex> g(s->mu);
  s->store(fence);
  while (!s->pending.empty() && s->pending.front().first <= fence) {
    s->spare.push_back(s->pending.front().second);  // recorded again only after this fence's record has run
    s->pending.pop_front();
  }
  return 0;
}

int streamSynchronize(void* stream) {
  auto* s = static_cast<Stream*>(stream);
  const cudaError_t e = cudaStreamSynchronize(s->native);
  return e == cudaSuccess ? 0 : failed(e, fmt::format("cuda:{}: cudaStreamSynchronize", s->device));
}

// The stream may still have to pass its waits, which read the flag: it is released past every fence and waited
// for before the flag is freed.
void streamClose(void* stream) {
  auto* s = static_cast<Stream*>(stream);
  {
    std::lock_guard<std::mutex> g(s->mu);
    s->store(s->made);
  }
  cudaStreamSynchronize(s->native);
  OnDevice on(s->device);
  for (auto& p : s->pending) cudaEventDestroy(p.second);
  for (cudaEvent_t ev : s->spare) cudaEventDestroy(ev);
  keepFlag(s->flag);
  delete s;
}

}  // namespace chorus::transport::cuda
