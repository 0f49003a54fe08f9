// Reduction kernel throughput per ISA, datatype, op and size, next to memcpy of the same sizes.
// bytes/second counts bytes read + written: 3 * size for reduce (a, b -> dst), 2 * size for memcpy.
// Wall-clock rates: memory bandwidth is what is measured. Example: reduce_bench --benchmark_filter='float32/sum|memcpy'
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "lib/kernels/reduce.h"

namespace {

using namespace chorus::kernels;

const chorusDataType_t kTypes[] = {chorusInt8,    chorusUint8,   chorusInt32,   chorusUint32, chorusInt64,
                                   chorusUint64,  chorusFloat16, chorusFloat32, chorusFloat64, chorusBfloat16};
const chorusRedOp_t kOps[] = {chorusSum, chorusProd, chorusMax, chorusMin, chorusAvg};
const size_t kSizes[] = {size_t(64) << 10, size_t(1) << 20, size_t(64) << 20};  // bytes per input

// Page-aligned, touched before timing so page faults stay out of the measurement.
struct Buffer {
  unsigned char* p;
  explicit Buffer(size_t bytes)
      : p(static_cast<unsigned char*>(std::aligned_alloc(4096, (bytes + 4095) & ~size_t(4095)))) {
    std::memset(p, 0, bytes);
  }
  ~Buffer() { std::free(p); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

// Values that keep every op on normal, finite numbers (no denormal slow paths, no overflow to inf).
void fill(unsigned char* p, size_t count, chorusDataType_t dt, unsigned seed) {
  const size_t es = dataTypeSize(dt);
  for (size_t i = 0; i < count; ++i) {
    const unsigned k = unsigned(i * 2654435761u + seed) % 97;
    uint64_t bits = k + 1;
    if (dt == chorusFloat16) bits = 0x3c00 + k;              // 1.0 .. 1.1
    if (dt == chorusBfloat16) bits = 0x3f80 + (k & 0x3f);    // 1.0 .. 1.5
    if (dt == chorusFloat32) {
      const float f = 1.0f + float(k) / 128.0f;
      std::memcpy(&bits, &f, 4);
    }
    if (dt == chorusFloat64) {
      const double d = 1.0 + double(k) / 128.0;
      std::memcpy(&bits, &d, 8);
    }
    std::memcpy(p + i * es, &bits, es);
  }
}

void bmReduce(benchmark::State& st, const char* isa, chorusDataType_t dt, chorusRedOp_t op, size_t bytes) {
  if (!forceIsa(isa)) {
    st.SkipWithError("ISA not available on this CPU");
    return;
  }
  const size_t es = dataTypeSize(dt), count = bytes / es;
  Buffer a(bytes), b(bytes), d(bytes);
  fill(a.p, count, dt, 1);
  fill(b.p, count, dt, 2);
  for (auto _ : st) {
    reduce(d.p, a.p, b.p, count, dt, op);
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(int64_t(st.iterations()) * int64_t(3 * count * es));
  forceIsa("auto");
}

void bmMemcpy(benchmark::State& st, size_t bytes) {
  Buffer src(bytes), dst(bytes);
  std::memset(src.p, 1, bytes);
  for (auto _ : st) {
    std::memcpy(dst.p, src.p, bytes);
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(int64_t(st.iterations()) * int64_t(2 * bytes));
}

std::string sizeName(size_t bytes) {
  return bytes >= (size_t(1) << 20) ? std::to_string(bytes >> 20) + "MiB" : std::to_string(bytes >> 10) + "KiB";
}

// Every ISA this CPU has (the active one first, portable last), every type x op x size, then memcpy.
int registerAll() {
  std::vector<const char*> isas = {activeIsa()};
  for (const char* n : {"avx512", "avx2", "portable"})
    if (std::strcmp(n, isas[0]) != 0 && forceIsa(n)) isas.push_back(n);
  forceIsa("auto");
  for (size_t bytes : kSizes)
    benchmark::RegisterBenchmark(("memcpy/" + sizeName(bytes)).c_str(), bmMemcpy, bytes)->UseRealTime();
  for (const char* isa : isas)
    for (chorusDataType_t dt : kTypes)
      for (chorusRedOp_t op : kOps)
        for (size_t bytes : kSizes) {
          const std::string name = std::string("reduce/") + isa + "/" + dataTypeName(dt) + "/" + redOpName(op) +
                                   "/" + sizeName(bytes);
          benchmark::RegisterBenchmark(name.c_str(), bmReduce, isa, dt, op, bytes)->UseRealTime();
        }
  return 0;
}

const int kRegistered = registerAll();

}  // namespace

BENCHMARK_MAIN();
