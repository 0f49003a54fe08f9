// A process with the CUDA driver loaded but no CUDA plugin that can run (Note [A driver without its plugin] in
// transports/plugin_memory.cc): device memory is refused naming the argument and why, never read as host memory;
// host memory works as ever. The driver is a stand-in (test/fixtures/cuda_driver) that calls one range of host
// memory device memory; the real CUDA plugin, where built, then reports "no CUDA-capable device".
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <mutex>
#include <string>
#include <vector>

#include "chorus/chorus.h"
#include "test/ranks.h"
#include "test/shell.h"

namespace {

using chorus::test::check;
using chorus::test::runRanks;

void (*markDevice)(void*, size_t) = nullptr;

// Communicators made before the process loads the driver (here: before this suite's first test loads the stand-in)
// still refuse its device memory, naming the argument, rather than reading it (Note [A driver loaded later] in
// lib/comm/devices.cc).
TEST(DriverLoadedLater, DeviceMemoryOfADriverLoadedAfterTheCommunicatorIsRefused) {
  std::vector<float> device(32, 1.0f);
  const std::string path = chorus::test::buildDir() + "/test/fixtures/cuda_driver/libcuda.so.1";
  std::once_flag loaded;
  void (*mark)(void*, size_t) = nullptr;
  auto errors = runRanks(2, [&](int r, chorusComm_t& comm) {
    std::call_once(loaded, [&] {  // after both communicators exist: runRanks makes them before the body runs
      void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
      ASSERT_NE(h, nullptr) << dlerror();
      mark = reinterpret_cast<void (*)(void*, size_t)>(dlsym(h, "fakecudaMarkDevice"));
      ASSERT_NE(mark, nullptr);
      mark(device.data(), device.size() * sizeof(float));
    });
    float* mine = device.data() + 16 * r;
    EXPECT_NE(chorusAllReduce(mine, mine, 16, chorusFloat32, chorusSum, comm, nullptr), chorusSuccess);
    const std::string text = chorusGetLastError(comm);
    for (const char* w : {"sendbuff", "cuda:0"}) EXPECT_NE(text.find(w), std::string::npos) << w << " not in " << text;
    EXPECT_EQ(mine[3], 1.0f) << "the device memory was written";
  });
  for (const auto& e : errors) ADD_FAILURE() << e;
}

class CudaDriver : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string path = chorus::test::buildDir() + "/test/fixtures/cuda_driver/libcuda.so.1";
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    ASSERT_NE(h, nullptr) << dlerror();
    markDevice = reinterpret_cast<void (*)(void*, size_t)>(dlsym(h, "fakecudaMarkDevice"));
    ASSERT_NE(markDevice, nullptr);
  }
  // The code and words of the refusal: which depends on whether this build has the CUDA plugin.
  static bool pluginBuilt() {
    return chorus::test::runShell("test -f " + chorus::test::buildDir() +
                                  "/transports/cuda_ipc/libchorus-cuda_ipc.so").status == 0;
  }
};

TEST_F(CudaDriver, DeviceMemoryIsRefusedNamingTheArgumentAndWhyHostMemoryWorks) {
  std::vector<float> device(64, 1.0f);  // the stand-in driver's "device memory"
  markDevice(device.data(), device.size() * sizeof(float));
  const chorusResult_t want = pluginBuilt() ? chorusUnhandledCudaError : chorusInvalidArgument;
  const std::string why = pluginBuilt() ? "CUDA plugin cannot run here" : "has no CUDA plugin";
  auto errors = runRanks(2, [&](int r, chorusComm_t& comm) {
    std::vector<float> host(16, 1.0f), out(16, 0.0f);
    auto expectRefused = [&](chorusResult_t rc, std::initializer_list<std::string> words) {
      EXPECT_EQ(rc, want) << chorusGetLastError(comm);
      const std::string text = chorusGetLastError(comm);
      for (const std::string& w : words) EXPECT_NE(text.find(w), std::string::npos) << "'" << w << "' not in: " << text;
    };
    float* mine = device.data() + 16 * r;  // each rank its own part of the range
    expectRefused(chorusAllReduce(mine, mine, 16, chorusFloat32, chorusSum, comm, nullptr),
                  {"chorusAllReduce", "sendbuff", "cuda:0", why});
    expectRefused(chorusAllReduce(host.data(), mine, 16, chorusFloat32, chorusSum, comm, nullptr),
                  {"recvbuff", "cuda:0", why});
    expectRefused(chorusBroadcast(mine, mine, 16, chorusFloat32, 0, comm, nullptr), {"cuda:0", why});
    chorusStream_t s = nullptr;
    EXPECT_EQ(chorusStreamCreateFromCuda(comm, nullptr, &s), want);
    EXPECT_NE(std::string(chorusGetLastError(comm)).find(why), std::string::npos) << chorusGetLastError(comm);
    void* p = nullptr;
    EXPECT_EQ(chorusMemAlloc(&p, 64), want);
    EXPECT_NE(std::string(chorusGetLastError(nullptr)).find(why), std::string::npos) << chorusGetLastError(nullptr);
    // Nothing was read or written, and host memory still works.
    EXPECT_EQ(mine[3], 1.0f);
    check(chorusAllReduce(host.data(), out.data(), 16, chorusFloat32, chorusSum, comm, nullptr), comm, "host");
    EXPECT_EQ(out[5], 2.0f);
  });
  for (const auto& e : errors) ADD_FAILURE() << e;
}

// The plugin's own words reach the caller: CUDA's "no CUDA-capable device is detected" through the stand-in.
TEST_F(CudaDriver, TheRefusalCarriesTheCudaRuntimesOwnText) {
  if (!pluginBuilt()) GTEST_SKIP() << "the CUDA plugin is not built (no nvcc found): its text cannot be checked";
  std::vector<float> device(8, 0.0f);
  markDevice(device.data(), device.size() * sizeof(float));
  auto errors = runRanks(1, [&](int, chorusComm_t& comm) {
    EXPECT_EQ(chorusAllReduce(device.data(), device.data(), 8, chorusFloat32, chorusSum, comm, nullptr),
              chorusUnhandledCudaError);
    const std::string text = chorusGetLastError(comm);
    EXPECT_NE(text.find("libchorus-cuda_ipc.so: not available: "), std::string::npos) << text;
    EXPECT_NE(text.find("CUDA-capable device"), std::string::npos) << text;
  });
  for (const auto& e : errors) ADD_FAILURE() << e;
}

}  // namespace
