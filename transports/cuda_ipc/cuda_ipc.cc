// CUDA IPC handles. An export names the allocation holding a pointer (its start and CUDA's process-wide unique
// buffer id, both from one cuPointerGetAttributes) and carries cudaIpcGetMemHandle's handle, made once per
// allocation: a cached handle is reused only while the allocation at that start keeps its buffer id. An open maps
// it with cudaIpcOpenMemHandle, once per process however many communicators ask (CUDA maps a handle at most once
// per context), counted, and unmapped when the last one closes; between threads of one process, where CUDA refuses
// to open its own handles, the start itself is the mapping.
#include "transports/cuda_ipc/cuda_ipc.h"

#include <cuda.h>
#include <cuda_runtime.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "lib/base/immortal.h"
#include "transports/cuda_ipc/cuda_error.h"
#include "transports/plugin.h"

namespace chorus::transport::cuda {

namespace {

struct Blob {
  cudaIpcMemHandle_t handle;
  uint64_t bufferId;  // CU_POINTER_ATTRIBUTE_BUFFER_ID: unique per allocation in the exporting process
  uint64_t start;     // of the allocation, in the exporter's address space
  int32_t pid;        // the exporter's
  int32_t device;
};
static_assert(sizeof(Blob) <= CHORUS_IPC_HANDLE_BYTES);

using GetAttributes = CUresult (*)(unsigned, CUpointer_attribute*, void**, CUdeviceptr);

GetAttributes getAttributes() {
  static const GetAttributes fn = driverEntryPoint<GetAttributes>("cuPointerGetAttributes");
  return fn;
}

std::mutex gMu;
struct Exported {
  uint64_t bufferId;
  cudaIpcMemHandle_t handle;
  bool exportable;  // false: cudaIpcGetMemHandle refused it (asked once per allocation)
};
Immortal<std::map<uint64_t, Exported>> gExported;  // by allocation start (Note [Immortal statics])
struct Mapped {
  void* base;
  int refs;
};
Immortal<std::map<std::string, Mapped>> gMapped;  // by the handle's bytes

int refuse(const std::string& why) {
  setError(why);
  return chorusUnhandledCudaError;
}

}  // namespace

int ipcExport(int device, const void* p, uint8_t* out, size_t* offset) {
  GetAttributes get = getAttributes();
  if (get == nullptr) return refuse("the CUDA driver has no cuPointerGetAttributes (CUDA 12 or later is needed)");
  CUpointer_attribute which[] = {CU_POINTER_ATTRIBUTE_BUFFER_ID, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR};
  unsigned long long bufferId = 0;
  CUdeviceptr start = 0;
  void* data[] = {&bufferId, &start};
  if (const CUresult r = get(2, which, data, reinterpret_cast<CUdeviceptr>(p)); r != CUDA_SUCCESS || start == 0)
    return refuse(fmt::format("cuda:{}: cuPointerGetAttributes({}) failed (CUresult {})", device, p,
                              static_cast<int>(r)));
  Blob b{};
  b.bufferId = bufferId;
  b.start = start;
  b.pid = getpid();
  b.device = device;
  {
    std::lock_guard<std::mutex> g(gMu);
    auto it = gExported->find(start);
    if (it == gExported->end() || it->second.bufferId != bufferId) {
      OnDevice on(device);
      cudaError_t e = on.error();
      cudaIpcMemHandle_t h{};
      if (e == cudaSuccess) e = cudaIpcGetMemHandle(&h, reinterpret_cast<void*>(start));
      if (e != cudaSuccess) cudaGetLastError();  // handled here: not the application's error to find later
      it = gExported->insert_or_assign(start, Exported{bufferId, h, e == cudaSuccess}).first;
      if (e != cudaSuccess)
        return failed(e, fmt::format("cuda:{}: cudaIpcGetMemHandle of the allocation holding {}", device, p));
    }
    if (!it->second.exportable)
      return refuse(fmt::format("cuda:{}: the allocation holding {} cannot be exported (cudaIpcGetMemHandle refused "
                                "it: memory of cudaMallocAsync pools or cuMemCreate)", device, p));
    b.handle = it->second.handle;
  }
  std::memset(out, 0, CHORUS_IPC_HANDLE_BYTES);
  std::memcpy(out, &b, sizeof b);
  *offset = reinterpret_cast<uintptr_t>(p) - start;
  return 0;
}

// Between threads of one process on two GPUs, the start itself is the mapping, and the copy engine and kernels
// reach it once peer access is on (CUDA enables it per direction, for the whole context, once).
int enablePeerAccess(int device, int other) {
  if (other == device) return 0;
  OnDevice on(device);
  cudaError_t e = on.error();
  if (e == cudaSuccess) e = cudaDeviceEnablePeerAccess(other, 0);
  if (e == cudaErrorPeerAccessAlreadyEnabled) {
    cudaGetLastError();  // handled here: not the application's error to find later
    return 0;
  }
  if (e != cudaSuccess) cudaGetLastError();
  return e == cudaSuccess ? 0 : failed(e, fmt::format("cuda:{}: cudaDeviceEnablePeerAccess to cuda:{}", device, other));
}

int ipcOpen(int device, const uint8_t* handle, void** base) {
  Blob b;
  std::memcpy(&b, handle, sizeof b);
  if (b.pid == getpid()) {
    if (const int rc = enablePeerAccess(device, b.device); rc != 0) return rc;
    *base = reinterpret_cast<void*>(b.start);
    return 0;
  }
  const std::string key(reinterpret_cast<const char*>(handle), sizeof b);
  std::lock_guard<std::mutex> g(gMu);
  auto it = gMapped->find(key);
  if (it == gMapped->end()) {
    OnDevice on(device);
    cudaError_t e = on.error();
    void* p = nullptr;
    if (e == cudaSuccess) e = cudaIpcOpenMemHandle(&p, b.handle, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) {
      cudaGetLastError();
      return failed(e, fmt::format("cuda:{}: cudaIpcOpenMemHandle of memory of pid {} on cuda:{}", device, b.pid,
                                   b.device));
    }
    it = gMapped->emplace(key, Mapped{p, 0}).first;
  }
  ++it->second.refs;
  *base = it->second.base;
  return 0;
}

int ipcClose(int device, const uint8_t* handle, void*) {
  Blob b;
  std::memcpy(&b, handle, sizeof b);
  if (b.pid == getpid()) return 0;
  std::lock_guard<std::mutex> g(gMu);
  auto it = gMapped->find(std::string(reinterpret_cast<const char*>(handle), sizeof b));
  if (it == gMapped->end() || --it->second.refs > 0) return 0;
  OnDevice on(device);
  const cudaError_t e = cudaIpcCloseMemHandle(it->second.base);
  gMapped->erase(it);
  return e == cudaSuccess ? 0 : failed(e, fmt::format("cuda:{}: cudaIpcCloseMemHandle", device));
}

int deviceCount(int* n) {
  const cudaError_t e = cudaGetDeviceCount(n);
  return e == cudaSuccess ? 0 : failed(e, "cudaGetDeviceCount");
}

int deviceId(int device, char* id, size_t len) {
  const cudaError_t e = cudaDeviceGetPCIBusId(id, static_cast<int>(len), device);
  return e == cudaSuccess ? 0 : failed(e, fmt::format("cuda:{}: cudaDeviceGetPCIBusId", device));
}

int peerAccess(int device, int other, int* yes) {
  const cudaError_t e = cudaDeviceCanAccessPeer(yes, device, other);
  return e == cudaSuccess ? 0 : failed(e, fmt::format("cuda:{}: cudaDeviceCanAccessPeer to cuda:{}", device, other));
}

}  // namespace chorus::transport::cuda
