// The fake devices' plugin (test/fixtures/memory/fakedev.cc) as the device suites see it: loaded through the plugin
// host, its knobs and counters, the test's own buffers in its memory, and the collective matrix over them.
#pragma once

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "test/comms.h"
#include "test/space_matrix.h"
#include "transports/plugin.h"
#include "transports/registry.h"

namespace chorus::test::fakedev {

using test::Coll;

// The fake devices' plugin, loaded as any device runtime is: through the plugin host, which registers it.
struct FakePlugin {
  const chorusMemoryPlugin_v4_t* table = nullptr;
  void (*setCurrent)(int) = nullptr;
  void (*setThreadCurrent)(int) = nullptr;  // the calling thread's own current device (-1: the shared one)
  void (*setPeerAccess)(int) = nullptr;     // 0: devices 0 and 1 cannot reach each other's memory
  void (*failAllocations)(int) = nullptr;
  void (*setAllocationsSynchronize)(int) = nullptr;  // 1: Chorus's allocations wait for the device's streams
  void (*setHostAccessible)(int) = nullptr;  // 0: per-block keys for what is allocated next (see fakedev.cc)
  long (*reduces)() = nullptr;
  long (*allocations)() = nullptr;   // by Chorus (scratch), not the test's buffers
  void* (*testBuffer)(int, size_t) = nullptr;
  // Device streams: threads that run what is queued in order (fakedev.cc).
  void* (*streamCreate)(int) = nullptr;
  void (*streamLaunch)(void*, void (*)(void*), void*) = nullptr;
  void (*streamFail)(void*) = nullptr;  // queues a kernel that fails
  void (*streamDestroy)(void*) = nullptr;
  void (*streamCapture)(void*, int) = nullptr;  // 1: the stream is being captured into a graph (fences refused)
  void* (*defaultStream)(int) = nullptr;        // the device's default stream (CUDA's legacy stream 0)
  long (*fences)() = nullptr;
  long (*deviceSyncs)() = nullptr;  // frees that waited for the whole device (as cudaFree does)
  long (*openStreams)() = nullptr;  // opened by Chorus and not closed yet
  // Staging: pinned host memory handed out, device copies started, and a delay before each copy runs.
  long (*hostAllocations)() = nullptr;
  long (*copiesStarted)() = nullptr;
  void (*setCopyDelayUs)(int) = nullptr;
  // Device IPC: handles exported, opened and closed, and reductions started on the copy queue.
  long (*ipcExports)() = nullptr;
  long (*ipcOpens)() = nullptr;
  long (*ipcCloses)() = nullptr;
  long (*reduceStarts)() = nullptr;
  void (*setTestBuffersExportable)(int) = nullptr;  // 0: the test's own buffers cannot be exported
  long (*ipcExportsRefused)() = nullptr;
};
inline const FakePlugin& fake() {
  static const FakePlugin f = [] {
    const char* build = std::getenv("TEST_BUILD_DIR");
    const std::string dir = std::string(build ? build : "build") + "/test/fixtures/memory";
    const char* path = std::getenv("CHORUS_PLUGIN_PATH");
    setenv("CHORUS_PLUGIN_PATH", (dir + (path ? std::string(":") + path : std::string())).c_str(), 1);
    transport::loadAllPlugins();
    FakePlugin p;
    void* h = dlopen((dir + "/libchorus-fakedev.so").c_str(), RTLD_NOW | RTLD_NOLOAD);
    if (h == nullptr) return p;
    p.table = static_cast<const chorusMemoryPlugin_v4_t*>(dlsym(h, CHORUS_MEMORY_PLUGIN_SYMBOL));
    p.setCurrent = reinterpret_cast<void (*)(int)>(dlsym(h, "fakedevSetCurrent"));
    p.setThreadCurrent = reinterpret_cast<void (*)(int)>(dlsym(h, "fakedevSetThreadCurrent"));
    p.setPeerAccess = reinterpret_cast<void (*)(int)>(dlsym(h, "fakedevSetPeerAccess"));
    p.failAllocations = reinterpret_cast<void (*)(int)>(dlsym(h, "fakedevFailAllocations"));
    p.setAllocationsSynchronize = reinterpret_cast<void (*)(int)>(dlsym(h, "fakedevSetAllocationsSynchronize"));
    p.setHostAccessible = reinterpret_cast<void (*)(int)>(dlsym(h, "fakedevSetHostAccessible"));
    p.reduces = reinterpret_cast<long (*)()>(dlsym(h, "fakedevReduces"));
    p.allocations = reinterpret_cast<long (*)()>(dlsym(h, "fakedevAllocations"));
    p.testBuffer = reinterpret_cast<void* (*)(int, size_t)>(dlsym(h, "fakedevTestBuffer"));
    p.streamCreate = reinterpret_cast<void* (*)(int)>(dlsym(h, "fakedevStreamCreate"));
    p.streamLaunch = reinterpret_cast<void (*)(void*, void (*)(void*), void*)>(dlsym(h, "fakedevStreamLaunch"));
    p.streamFail = reinterpret_cast<void (*)(void*)>(dlsym(h, "fakedevStreamFail"));
    p.streamDestroy = reinterpret_cast<void (*)(void*)>(dlsym(h, "fakedevStreamDestroy"));
    p.streamCapture = reinterpret_cast<void (*)(void*, int)>(dlsym(h, "fakedevStreamCapture"));
    p.defaultStream = reinterpret_cast<void* (*)(int)>(dlsym(h, "fakedevDefaultStream"));
    p.fences = reinterpret_cast<long (*)()>(dlsym(h, "fakedevFences"));
    p.deviceSyncs = reinterpret_cast<long (*)()>(dlsym(h, "fakedevDeviceSyncs"));
    p.openStreams = reinterpret_cast<long (*)()>(dlsym(h, "fakedevOpenStreams"));
    p.hostAllocations = reinterpret_cast<long (*)()>(dlsym(h, "fakedevHostAllocations"));
    p.copiesStarted = reinterpret_cast<long (*)()>(dlsym(h, "fakedevCopiesStarted"));
    p.setCopyDelayUs = reinterpret_cast<void (*)(int)>(dlsym(h, "fakedevSetCopyDelayUs"));
    p.ipcExports = reinterpret_cast<long (*)()>(dlsym(h, "fakedevIpcExports"));
    p.ipcOpens = reinterpret_cast<long (*)()>(dlsym(h, "fakedevIpcOpens"));
    p.ipcCloses = reinterpret_cast<long (*)()>(dlsym(h, "fakedevIpcCloses"));
    p.reduceStarts = reinterpret_cast<long (*)()>(dlsym(h, "fakedevReduceStarts"));
    p.setTestBuffersExportable = reinterpret_cast<void (*)(int)>(dlsym(h, "fakedevSetTestBuffersExportable"));
    p.ipcExportsRefused = reinterpret_cast<long (*)()>(dlsym(h, "fakedevIpcExportsRefused"));
    return p;
  }();
  return f;
}

// Loads the plugin (once) and makes `device` current (-1: none) for the communicators created next.
inline void useDevice(int device) {
  ASSERT_NE(fake().table, nullptr) << "libchorus-fakedev.so was not loaded by the plugin host";
  fake().setCurrent(device);
}

// A fake device's memory for the test's own buffers (not counted as Chorus's allocations), moved through the
// plugin's copy.
class FakeMemory final : public test::TestMemory {
 public:
  explicit FakeMemory(int device) : device_(device) {}
  void* allocate(size_t bytes) override { return fake().testBuffer(device_, bytes); }
  void release(void* p) override { fake().table->release(device_, p); }
  void copy(void* dst, const void* src, size_t bytes) override { fake().table->copy(device_, dst, src, bytes); }

 private:
  int device_;
};
inline test::TestMemory& dev(int device) {
  static FakeMemory devices[] = {FakeMemory(0), FakeMemory(1)};
  return devices[device];
}

// The matrix over fake device 0; where it reduces, the reductions and the scratch must have gone through the device.
inline void runMatrix(int n, const char* algo, const std::vector<Coll>& colls) {
  useDevice(0);
  const long reducesBefore = fake().reduces(), allocationsBefore = fake().allocations();
  test::runMatrix(dev(0), n, algo, colls);
  bool anyReduction = false;
  for (Coll c : colls) anyReduction |= test::reduces(c);
  if (n > 1 && anyReduction) {
    EXPECT_GT(fake().reduces(), reducesBefore) << "no reduction went through the device";
    EXPECT_GT(fake().allocations(), allocationsBefore) << "no scratch came from the device";
  }
}

}  // namespace chorus::test::fakedev
