#include "lib/comm/devices.h"

#include "lib/base/error.h"
#include "transports/plugin_memory.h"
#include "transports/registry.h"

namespace chorus {

std::string whyNoRuntime(chorusResult_t* code) {
  std::string seen;
  for (const std::string& line : transport::memoryPlugins()) seen += (seen.empty() ? "" : "; ") + line;
  *code = seen.empty() ? chorusInvalidUsage : chorusUnhandledCudaError;  // none built, or the runtime's own failure
  return fmt::format("no device runtime is loaded in this process ({})",
                     seen.empty() ? "no memory plugin was found: this Chorus was built without CUDA" : seen);
}

mem::Runtime* findDeviceRuntime(bool always) {
  if (always || transport::deviceDriverInProcess()) {
    transport::loadAllPlugins();
    transport::probeDeviceDriver();
  }
  return mem::runtime();
}

void* deviceAllocate(size_t bytes) {
  mem::Runtime* runtime = findDeviceRuntime(true);
  chorusResult_t code = chorusInvalidUsage;
  if (runtime == nullptr) {
    const std::string why = whyNoRuntime(&code);
    fail(code, "chorusMemAlloc: {}", why);
  }
  if (const char* why = runtime->unusable(&code)) fail(code, "chorusMemAlloc: no device memory can be used: {}", why);
  mem::Device* device = runtime->current();
  if (device == nullptr)
    fail(chorusInvalidUsage, "chorusMemAlloc: the calling thread has no current device ({} runtime)", runtime->name());
  return bytes == 0 ? nullptr : device->allocate(bytes);
}

void deviceFree(void* p) {
  if (p == nullptr) return;
  const mem::Space s = mem::classify(p);
  if (s.isHost())
    fail(chorusInvalidArgument, "chorusMemFree: ptr {} is not device memory (not from chorusMemAlloc)", p);
  s.device()->release(p);
}

}  // namespace chorus
