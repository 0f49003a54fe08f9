// Exported functions: device memory (NCCL's ncclMemAlloc / ncclMemFree).
#include "lib/api/api_guard.h"
#include "lib/comm/devices.h"

using namespace chorus;

extern "C" {

chorusResult_t chorusMemAlloc(void** ptr, size_t size) {
  return apiCall(nullptr, [&] {
    if (ptr == nullptr) fail(chorusInvalidArgument, "chorusMemAlloc: ptr (the output pointer) is NULL");
    *ptr = deviceAllocate(size);
  });
}

chorusResult_t chorusMemFree(void* ptr) {
  return apiCall(nullptr, [&] { deviceFree(ptr); });
}

}  // extern "C"
