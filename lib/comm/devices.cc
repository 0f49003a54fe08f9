#include "lib/comm/devices.h"

#include "lib/base/error.h"
#include "transports/plugin_memory.h"
#include "transports/registry.h"

namespace chorus {

mem::Runtime* findDeviceRuntime(bool always) {
  if (always || transport::deviceDriverInProcess()) {
    transport::loadAllPlugins();
    transport::probeDeviceDriver();
  }
  return mem::runtime();
}

void* deviceAllocate(size_t bytes) {
  mem::Runtime* runtime = findDeviceRuntime(true);
  if (runtime == nullptr)
    fail(chorusInvalidUsage, "chorusMemAlloc: no device runtime is loaded in this process (chorus_info says why)");
  chorusResult_t code = chorusInvalidUsage;
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
