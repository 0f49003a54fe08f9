// allreduce_check: one rank of a multi-process AllReduce correctness run (started by chorusrun, so ranks can be
// put on different "hosts" with CHORUS_HOSTID and the algorithm forced with CHORUS_ALGO). Every datatype x op x
// count (odd ones, and enough to be cut into many chunks) x in place / out of place, checked element by element
// against test/reference.h on every rank; out of place also checks that sendbuff is unchanged.
// Prints "allreduce_check: rank R: N cases ok" or the first mismatch, and exits 1 on any failure.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "test/reference.h"

using namespace chorus::test;

int main() {
  chorusComm_t comm = nullptr;
  if (chorusCommInitFromEnv(&comm) != chorusSuccess) {
    std::fprintf(stderr, "allreduce_check: init: %s\n", chorusGetLastError(nullptr));
    return 1;
  }
  int n = 0, rank = 0;
  chorusCommCount(comm, &n);
  chorusCommUserRank(comm, &rank);
  const size_t counts[] = {1, 2, 3, 17, 1000, 40001};
  int cases = 0;
  uint64_t seed = 1;
  for (chorusDataType_t dt : kAllTypes)
    for (chorusRedOp_t op : kAllOps)
      for (size_t count : counts)
        for (bool inPlace : {false, true}) {
          ++seed;
          const size_t es = typeSize(dt);
          std::vector<uint8_t> send(count * es), recv(count * es, 0xA5);
          for (size_t i = 0; i < count; ++i) {
            uint64_t raw = inputRaw(dt, op, seed, rank, i);
            std::memcpy(send.data() + i * es, &raw, es);
          }
          std::vector<uint8_t> original = send;
          void* out = inPlace ? send.data() : recv.data();
          chorusResult_t rc = chorusAllReduce(send.data(), out, count, dt, op, comm, nullptr);
          std::string what = std::string(typeName(dt)) + " " + opName(op) + " count " + std::to_string(count) +
                             (inPlace ? " in place" : " out of place");
          if (rc != chorusSuccess) {
            std::printf("allreduce_check: rank %d: %s: %s: %s\n", rank, what.c_str(), chorusGetErrorString(rc),
                        chorusGetLastError(comm));
            return 1;
          }
          for (size_t i = 0; i < count; ++i) {
            Want w = referenceReduce(dt, op, n, [&](int q) { return inputRaw(dt, op, seed, q, i); });
            uint64_t got = readRaw(static_cast<const uint8_t*>(out) + i * es, es);
            if (!matches(dt, w, got)) {
              std::printf("allreduce_check: rank %d of %d: %s: index %zu is %s, expected %s\n", rank, n, what.c_str(),
                          i, showRaw(dt, got).c_str(), showRaw(dt, w.raw).c_str());
              return 1;
            }
          }
          if (!inPlace && send != original) {
            std::printf("allreduce_check: rank %d: %s: sendbuff was modified\n", rank, what.c_str());
            return 1;
          }
          ++cases;
        }
  chorusCommDestroy(comm);
  std::printf("allreduce_check: rank %d: %d cases ok\n", rank, cases);
  return 0;
}
