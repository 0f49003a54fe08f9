// Device buffers on a real GPU, through the CUDA plugin (transports/cuda_ipc): the collective matrix over CUDA
// memory for 2 and 4 ranks sharing one GPU, as threads of this process and as processes (CUDA IPC between them),
// equal bit for bit to the same calls over host memory; NCCL's stream order with real kernels on a CUDA stream; chorusMemAlloc. Without a GPU every test
// reports SKIP with CUDA's reason. scripts/gpu-check.sh runs it (also with CHORUS_CUDA_STREAM_WAIT=hostfn and
// under compute-sanitizer).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "chorus/chorus.h"
#include "test/gpu/cuda_memory.h"
#include "test/gpu/kernels.cuh"
#include "test/shell.h"
#include "test/ranks.h"
#include "test/space_matrix.h"

namespace {

using namespace chorus::test;

// "" when this process can use a GPU, else CUDA's reason.
std::string noGpu() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) return std::string("no usable GPU: ") + cudaGetErrorString(e);
  return n == 0 ? "no GPU" : "";
}

#define REQUIRE_GPU()                                         \
  do {                                                        \
    if (const std::string why = noGpu(); !why.empty()) GTEST_SKIP() << why; \
  } while (0)

CudaMemory gCuda;

class CudaMatrix : public ::testing::TestWithParam<int> {};

TEST_P(CudaMatrix, AllReduceEveryAlgorithmOverGpuMemoryEqualsHost) {
  REQUIRE_GPU();
  for (const char* algo : {"AUTO", "RING", "TREE"}) {
    SCOPED_TRACE(algo);
    runMatrix(gCuda, GetParam(), algo, {Coll::AllReduce});
  }
}

TEST_P(CudaMatrix, EveryOtherCollectiveOverGpuMemoryEqualsHost) {
  REQUIRE_GPU();
  runMatrix(gCuda, GetParam(), "AUTO", kAllButAllReduce);
}

TEST_P(CudaMatrix, GatherScatterAndPerRankCountsOverGpuMemoryEqualHost) {
  REQUIRE_GPU();
  runMatrix(gCuda, GetParam(), "AUTO", kGatherScatterV);
}

INSTANTIATE_TEST_SUITE_P(Ranks, CudaMatrix, ::testing::Values(2, 4));

// Ranks as processes (cuda_rank_matrix under chorusrun): device IPC between them opens each other's allocations
// with cudaIpcOpenMemHandle. Once with the reduce kernel reading the peer's buffer, once with the copy engine
// copying it to scratch first (CHORUS_DEVICE_IPC_REDUCE=0), once staged through host memory (CHORUS_DEVICE_IPC=0).
class CudaProcesses : public ::testing::TestWithParam<int> {};

TEST_P(CudaProcesses, TheMatrixAcrossProcessesEqualsHost) {
  REQUIRE_GPU();
  const std::string run = "CHORUS_DEBUG=INFO CHORUS_DEBUG_SUBSYS=INIT " + buildDir() + "/scripts/chorusrun -n " +
                          std::to_string(GetParam()) + " " + buildDir() + "/test/cuda_rank_matrix ";
  const RunResult full = runShell(run + "all");
  EXPECT_EQ(full.status, 0) << full.output;
  EXPECT_NE(full.output.find("over cuda:0 IPC"), std::string::npos) << "device IPC was not used:\n" << full.output;
  for (const char* mode : {"CHORUS_DEVICE_IPC_REDUCE=0", "CHORUS_DEVICE_IPC=0"}) {
    const RunResult r = runShell(std::string(mode) + " CHORUS_TEST_MATRIX=small CHORUS_ALGO=RING " + run + "allreduce");
    EXPECT_EQ(r.status, 0) << mode << ":\n" << r.output;
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, CudaProcesses, ::testing::Values(2, 4));

// One kernel spins 50 ms and then writes the input, the AllReduce runs on a chorusStream made from the same CUDA
// stream, and a kernel copies its output out; only CUDA's own cudaStreamSynchronize is waited for. The call must
// return while the first kernel still runs, and the copy must see the reduced values.
class CudaStreamOrder : public ::testing::TestWithParam<int> {};

TEST_P(CudaStreamOrder, KernelCollectiveKernelOnOneStreamWithoutTheHostBlocking) {
  REQUIRE_GPU();
  const int n = GetParam();
  constexpr size_t kCount = 1 << 20;
  auto errors = runRanks(n, [&](int r, chorusComm_t& comm) {
    cudaStream_t s = nullptr;
    ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    chorusStream_t cs = nullptr;
    check(chorusStreamCreateFromCuda(comm, s, &cs), comm, "chorusStreamCreateFromCuda");
    float *in = nullptr, *out = nullptr, *seen = nullptr;
    ok(cudaMalloc(&in, kCount * 4), "cudaMalloc");
    ok(cudaMalloc(&out, kCount * 4), "cudaMalloc");
    ok(cudaMalloc(&seen, kCount * 4), "cudaMalloc");
    for (int round = 0; round < 3; ++round) {
      ok(cudaMemset(in, 0, kCount * 4), "cudaMemset");
      ok(cudaMemset(out, 0xC3, kCount * 4), "cudaMemset");
      ok(cudaMemset(seen, 0, kCount * 4), "cudaMemset");
      ok(gpu::spinThenFill(s, in, kCount, static_cast<float>(r + 1 + round), 50), "spinThenFill");
      check(chorusAllReduce(in, out, kCount, chorusFloat32, chorusSum, comm, cs), comm, "AllReduce on the stream");
      EXPECT_EQ(cudaStreamQuery(s), cudaErrorNotReady) << "the call waited for the kernel queued before it";
      ok(gpu::copyOut(s, out, seen, kCount), "copyOut");
      ok(cudaStreamSynchronize(s), "cudaStreamSynchronize");
      std::vector<float> got(kCount);
      ok(cudaMemcpy(got.data(), seen, kCount * 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
      for (size_t i = 0; i < kCount; i += 4099) {
        float want = 0;
        for (int q = 0; q < n; ++q) want += static_cast<float>(q + 1 + round) + static_cast<float>(i % 7);
        ASSERT_EQ(got[i], want) << "round " << round << " element " << i << " as the kernel after it saw it";
      }
      check(chorusStreamSynchronize(cs), comm, "chorusStreamSynchronize");
    }
    check(chorusStreamDestroy(cs), comm, "chorusStreamDestroy");
    cudaFree(in);
    cudaFree(out);
    cudaFree(seen);
    cudaStreamDestroy(s);
  });
  for (const auto& e : errors) ADD_FAILURE() << e;
}

INSTANTIATE_TEST_SUITE_P(Ranks, CudaStreamOrder, ::testing::Values(2, 4));

// NCCL's stream 0 (Note [The default stream] in lib/comm/stream.cc): a blocking call on device memory starts after
// the kernel queued on the legacy default stream before it, which takes 50 ms and then writes the input.
TEST(CudaHazards, ABlockingCallFollowsTheDefaultStream) {
  REQUIRE_GPU();
  constexpr size_t kCount = 1 << 20;
  auto errors = runRanks(2, [&](int r, chorusComm_t& comm) {
    float* buf = nullptr;
    ok(cudaMalloc(&buf, kCount * 4), "cudaMalloc");
    ok(cudaMemset(buf, 0, kCount * 4), "cudaMemset");
    ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    ok(gpu::spinThenFill(cudaStreamLegacy, buf, kCount, static_cast<float>(r + 1), 50), "spinThenFill");
    check(chorusAllReduce(buf, buf, kCount, chorusFloat32, chorusSum, comm, nullptr), comm, "blocking AllReduce");
    std::vector<float> got(kCount);
    ok(cudaMemcpy(got.data(), buf, kCount * 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
    for (size_t i = 0; i < kCount; i += 4099)
      ASSERT_EQ(got[i], 3.0f + 2.0f * static_cast<float>(i % 7)) << "element " << i;
    cudaFree(buf);
  });
  for (const auto& e : errors) ADD_FAILURE() << e;
}

// DDP's first step (Note [Frees wait for quiet] in transports/plugin_memory.cc): calls on a CUDA stream whose
// scratch grows from 8 elements to 64 MiB, each followed by a kernel on the stream; cudaFree of the old scratch while
// the stream is held would hang inside the driver. gpu-check.sh's deadline turns a hang into a finding.
TEST(CudaHazards, ScratchGrowsWhileTheStreamIsHeld) {
  REQUIRE_GPU();
  constexpr size_t kLarge = size_t(16) << 20;
  auto errors = runRanks(2, [&](int r, chorusComm_t& comm) {
    cudaStream_t s = nullptr;
    ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    chorusStream_t cs = nullptr;
    check(chorusStreamCreateFromCuda(comm, s, &cs), comm, "chorusStreamCreateFromCuda");
    float* buf = nullptr;
    ok(cudaMalloc(&buf, kLarge * 4), "cudaMalloc");
    for (size_t count : {size_t(8), size_t(1) << 16, kLarge}) {
      ok(gpu::spinThenFill(s, buf, count, static_cast<float>(r + 1), 5), "spinThenFill");
      check(chorusAllReduce(buf, buf, count, chorusFloat32, chorusSum, comm, cs), comm, "AllReduce on the stream");
      ok(cudaStreamSynchronize(s), "cudaStreamSynchronize");
      float got = 0;
      ok(cudaMemcpy(&got, buf + count - 1, 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
      EXPECT_EQ(got, 3.0f + 2.0f * static_cast<float>((count - 1) % 7)) << "count " << count;
    }
    check(chorusStreamDestroy(cs), comm, "chorusStreamDestroy");
    cudaFree(buf);
    cudaStreamDestroy(s);
  });
  for (const auto& e : errors) ADD_FAILURE() << e;
}

// Note [One hardware queue] in transports/cuda_ipc/cuda_stream.cc: under CUDA_DEVICE_MAX_CONNECTIONS=1 (which the
// driver reads at context creation, so gpu-check.sh sets it for the whole run) a CUDA stream is refused, naming it,
// and a blocking call still works.
TEST(CudaHazards, OneHardwareQueueIsRefusedNamingIt) {
  REQUIRE_GPU();
  const char* c = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  if (c == nullptr || std::string(c) != "1") GTEST_SKIP() << "run with CUDA_DEVICE_MAX_CONNECTIONS=1";
  auto errors = runRanks(2, [&](int r, chorusComm_t& comm) {
    cudaStream_t s = nullptr;
    ok(cudaStreamCreate(&s), "cudaStreamCreate");
    chorusStream_t cs = nullptr;
    EXPECT_EQ(chorusStreamCreateFromCuda(comm, s, &cs), chorusInvalidUsage);
    EXPECT_NE(std::string(chorusGetLastError(comm)).find("CUDA_DEVICE_MAX_CONNECTIONS=1"), std::string::npos)
        << chorusGetLastError(comm);
    float* buf = nullptr;
    ok(cudaMalloc(&buf, 1024 * 4), "cudaMalloc");
    ok(gpu::spinThenFill(cudaStreamLegacy, buf, 1024, static_cast<float>(r + 1), 1), "spinThenFill");
    check(chorusAllReduce(buf, buf, 1024, chorusFloat32, chorusSum, comm, nullptr), comm, "blocking AllReduce");
    cudaFree(buf);
    cudaStreamDestroy(s);
  });
  for (const auto& e : errors) ADD_FAILURE() << e;
}

// chorusMemAlloc gives this device's memory; a stream of another device is refused where there is one.
TEST(CudaApi, MemAllocAndStreamsOfAnotherDevice) {
  REQUIRE_GPU();
  auto errors = runRanks(2, [&](int r, chorusComm_t& comm) {
    void* p = nullptr;
    check(chorusMemAlloc(&p, 1024 * sizeof(float)), comm, "chorusMemAlloc");
    cudaPointerAttributes a{};
    ok(cudaPointerGetAttributes(&a, p), "cudaPointerGetAttributes");
    EXPECT_EQ(a.type, cudaMemoryTypeDevice);
    std::vector<float> host(1024, static_cast<float>(r + 1)), back(1024);
    ok(cudaMemcpy(p, host.data(), 4096, cudaMemcpyHostToDevice), "cudaMemcpy");
    check(chorusAllReduce(p, p, 1024, chorusFloat32, chorusMax, comm, nullptr), comm, "AllReduce");
    ok(cudaMemcpy(back.data(), p, 4096, cudaMemcpyDeviceToHost), "cudaMemcpy");
    EXPECT_EQ(back[100], 2.0f);
    check(chorusMemFree(p), comm, "chorusMemFree");
    int devices = 0;
    cudaGetDeviceCount(&devices);
    if (devices > 1) {
      ok(cudaSetDevice(1), "cudaSetDevice");
      cudaStream_t other = nullptr;
      ok(cudaStreamCreate(&other), "cudaStreamCreate");
      ok(cudaSetDevice(0), "cudaSetDevice");
      chorusStream_t cs = nullptr;
      EXPECT_EQ(chorusStreamCreateFromCuda(comm, other, &cs), chorusInvalidArgument);
      EXPECT_NE(std::string(chorusGetLastError(comm)).find("cuda:1"), std::string::npos) << chorusGetLastError(comm);
      cudaStreamDestroy(other);
    }
  });
  for (const auto& e : errors) ADD_FAILURE() << e;
}

}  // namespace
