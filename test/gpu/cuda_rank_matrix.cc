// One rank of the collective matrix over GPU memory, as a process of its own (test_cuda's CudaProcesses runs it
// under chorusrun): ranks of one host then reach each other over CUDA IPC between processes
// (cudaIpcOpenMemHandle), which ranks as threads of one process never use. Every call is compared bit for bit with
// the same call over host memory (test/space_matrix.h). Usage: cuda_rank_matrix [all|allreduce]; CHORUS_ALGO and
// CHORUS_TEST_MATRIX as for the matrix. Prints the first mismatches; exit 0 when there is none.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <exception>

#include "chorus/chorus.h"
#include "test/gpu/cuda_memory.h"
#include "test/space_matrix.h"

int main(int argc, char** argv) {
  using namespace chorus::test;
  const bool all = argc < 2 || std::strcmp(argv[1], "all") == 0;
  try {
    ok(cudaSetDevice(0), "cudaSetDevice");  // the communicator works on the device current at its creation
    chorusComm_t comm = nullptr;
    if (chorusCommInitFromEnv(&comm) != chorusSuccess) {
      std::fprintf(stderr, "chorusCommInitFromEnv: %s\n", chorusGetLastError(nullptr));
      return 2;
    }
    int r = 0, n = 0;
    chorusCommUserRank(comm, &r);
    chorusCommCount(comm, &n);
    CudaMemory memory;
    Report report;
    std::vector<Coll> colls = {Coll::AllReduce};
    if (all) colls.insert(colls.end(), kAllButAllReduce.begin(), kAllButAllReduce.end());
    rankMatrix(memory, r, n, comm, colls, &report);
    chorusCommDestroy(comm);
    for (const auto& f : report.first) std::fprintf(stderr, "rank %d: %s\n", r, f.c_str());
    std::printf("rank %d of %d: %zu mismatch(es)\n", r, n, report.total);
    return report.total == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_rank_matrix: %s\n", e.what());
    return 3;
  }
}
