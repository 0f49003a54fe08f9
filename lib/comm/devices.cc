#include "lib/comm/devices.h"

#include <link.h>

#include <atomic>

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

// Note [A driver loaded later]:
// A communicator made before the process's first CUDA call (torch creates its CPU group before touching CUDA) finds
// no driver loaded and so no runtime; device pointers of later calls would pass for host memory and the CPU would
// fault on them. So while no runtime is registered, each call asks whether the process has loaded a library since
// the last look (dl_iterate_phdr's count of loads: one call into the loader, about 8 ns, no system call) and, when
// it has, looks for the driver again. A process that never loads one pays that look per call and nothing else.
bool deviceRuntimeAppeared() {
  static std::atomic<unsigned long long> seenLoads{0};
  unsigned long long loads = 0;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        *static_cast<unsigned long long*>(data) = info->dlpi_adds;
        return 1;  // the count is the same in every entry: the first is enough
      },
      &loads);
  if (loads == seenLoads.load(std::memory_order_acquire)) return false;
  // Counted as seen only once looked at: a thread that finds the count unchanged finds any runtime registered.
  const bool found = findDeviceRuntime(false) != nullptr;
  seenLoads.store(loads, std::memory_order_release);
  return found;
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
