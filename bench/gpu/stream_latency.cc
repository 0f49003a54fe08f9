// What a call on a CUDA stream costs (Note [Device streams] in lib/comm/stream.cc), 2 ranks as threads sharing
// one GPU: an AllReduce of COUNT floats in device memory, blocking; on a chorusStream made from a CUDA stream,
// each call followed by cudaStreamSynchronize; and 200 such calls queued before one cudaStreamSynchronize; with
// host memory, blocking, for reference. CHORUS_CUDA_STREAM_WAIT=memop|hostfn chooses how the CUDA stream waits
// for the host (scripts/gpu-check.sh runs both). Prints us per call, median of 5 rounds.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "chorus/chorus.h"

namespace {

void ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "stream_latency: %s: %s\n", what, cudaGetErrorString(e));
  std::exit(1);
}
void ok(chorusResult_t r, const char* what, chorusComm_t comm) {
  if (r == chorusSuccess) return;
  std::fprintf(stderr, "stream_latency: %s: %s: %s\n", what, chorusGetErrorString(r), chorusGetLastError(comm));
  std::exit(1);
}

double seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

constexpr int kCalls = 200, kRounds = 5;
enum Mode { kHostBlocking, kDeviceBlocking, kStreamEach, kStreamQueued, kModes };
const char* const kNames[] = {"host memory, blocking", "device memory, blocking", "CUDA stream, synchronize each",
                              "CUDA stream, 200 queued"};

// us per call of each mode, rank 0's; both ranks run the same sequence.
void rank(int r, const chorusUniqueId& id, size_t count, std::vector<std::vector<double>>* out) {
  ok(cudaSetDevice(0), "cudaSetDevice");
  ok(cudaFree(nullptr), "cudaFree(0) (creating the context)");
  chorusComm_t comm = nullptr;
  ok(chorusCommInitRank(&comm, 2, id, r), "chorusCommInitRank", nullptr);
  cudaStream_t s = nullptr;
  ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  chorusStream_t cs = nullptr;
  ok(chorusStreamCreateFromCuda(comm, s, &cs), "chorusStreamCreateFromCuda", comm);
  float* dev = nullptr;
  ok(cudaMalloc(&dev, count * sizeof(float)), "cudaMalloc");
  ok(cudaMemset(dev, 0, count * sizeof(float)), "cudaMemset");
  std::vector<float> host(count, 0.0f);
  for (int round = 0; round < kRounds + 1; ++round) {  // round 0 warms up
    for (int m = 0; m < kModes; ++m) {
      ok(chorusBarrier(comm, nullptr), "chorusBarrier", comm);
      const double t0 = seconds();
      for (int i = 0; i < kCalls; ++i) {
        if (m == kHostBlocking) {
          ok(chorusAllReduce(host.data(), host.data(), count, chorusFloat32, chorusSum, comm, nullptr), "AllReduce",
             comm);
        } else if (m == kDeviceBlocking) {
          ok(chorusAllReduce(dev, dev, count, chorusFloat32, chorusSum, comm, nullptr), "AllReduce", comm);
        } else {
          ok(chorusAllReduce(dev, dev, count, chorusFloat32, chorusSum, comm, cs), "AllReduce", comm);
          if (m == kStreamEach) ok(cudaStreamSynchronize(s), "cudaStreamSynchronize");
        }
      }
      if (m == kStreamQueued) ok(cudaStreamSynchronize(s), "cudaStreamSynchronize");
      if (round > 0 && r == 0) (*out)[m].push_back((seconds() - t0) * 1e6 / kCalls);
    }
  }
  ok(chorusStreamSynchronize(cs), "chorusStreamSynchronize", comm);
  ok(chorusStreamDestroy(cs), "chorusStreamDestroy", comm);
  ok(chorusCommDestroy(comm), "chorusCommDestroy", nullptr);
  cudaFree(dev);
  cudaStreamDestroy(s);
}

}  // namespace

int main(int argc, char** argv) {
  const char* wait = std::getenv("CHORUS_CUDA_STREAM_WAIT");
  std::printf("# stream_latency: AllReduce float32 sum, 2 ranks (threads) on one GPU; CHORUS_CUDA_STREAM_WAIT=%s\n",
              wait ? wait : "(unset: memop where the driver has it)");
  std::printf("# %10s  %-32s %10s\n", "bytes", "mode", "us/call");
  std::vector<size_t> counts = {2, 16384};  // 8 B and 64 KiB
  if (argc > 1) counts = {static_cast<size_t>(std::atol(argv[1]))};
  for (size_t count : counts) {
    chorusUniqueId id;
    ok(chorusGetUniqueId(&id), "chorusGetUniqueId", nullptr);
    std::vector<std::vector<double>> us(kModes);
    std::thread other([&] { rank(1, id, count, nullptr); });
    rank(0, id, count, &us);
    other.join();
    for (int m = 0; m < kModes; ++m) {
      std::sort(us[m].begin(), us[m].end());
      std::printf("  %10zu  %-32s %10.2f\n", count * sizeof(float), kNames[m], us[m][us[m].size() / 2]);
    }
  }
  return 0;
}
