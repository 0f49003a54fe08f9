// Shared harness for the nccl-tests-style *_perf binaries: each collective fills a Coll and calls benchMain.
#pragma once

#include <chorus/chorus.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace bench {

// Buffer geometry for one size, in elements (nccl-tests' getCollByteCount).
struct Counts {
  size_t send = 0, recv = 0;   // elements in the send / receive buffers
  size_t param = 0;            // the count passed to the API (printed in the count column)
  size_t sendInplace = 0;      // in-place: send = base + rank*sendInplace elements
  size_t recvInplace = 0;      // in-place: recv = base + rank*recvInplace elements
};

// Everything a collective needs for one call or one check.
struct Ctx {
  chorusComm_t comm = nullptr;
  chorusStream_t stream = nullptr;  // NULL with -z 1
  bool syncEach = false;            // -z 2: synchronize the stream after every call
  int rank = 0, nranks = 1, root = 0;
  chorusDataType_t type = chorusFloat32;
  chorusRedOp_t op = chorusSum;
  bool reduces = false;             // picks the check pattern (see harness.cc)
  Counts c;
};

struct Coll {
  const char* name;                 // for the header, e.g. "AllReduce"
  bool usesOp, usesRoot, reduces;
  bool inplace;                     // false: the in-place column group prints N/A
  double (*busFactor)(int nranks);
  // count = size / elemsize for the requested size
  void (*getCounts)(size_t count, int nranks, Counts& c);
  chorusResult_t (*run)(const Ctx& x, const void* send, void* recv);
  void (*fill)(const Ctx& x, void* send);                 // check input of this rank
  int64_t (*check)(const Ctx& x, const void* recv);       // wrong elements on this rank
};

int benchMain(int argc, char** argv, const Coll& coll);

size_t typeSize(chorusDataType_t t);
inline void* at(void* p, const Ctx& x, size_t elems) { return static_cast<char*>(p) + elems * typeSize(x.type); }
inline const void* at(const void* p, const Ctx& x, size_t elems) {
  return static_cast<const char*>(p) + elems * typeSize(x.type);
}

// Check helpers. Element j of buf is input index first+j.
// fillInput: this pattern as rank `rank` would send it.
void fillInput(const Ctx& x, void* buf, size_t count, int rank, size_t first);
// wrongReduced: mismatches against the reduction (x.op) over all ranks' inputs.
int64_t wrongReduced(const Ctx& x, const void* buf, size_t count, size_t first);
// wrongFrom: mismatches against rank src's input.
int64_t wrongFrom(const Ctx& x, const void* buf, size_t count, int src, size_t first);

// IEEE binary16 / bfloat16 <-> float, round to nearest even.
uint16_t floatToHalf(float f);
float halfToFloat(uint16_t h);
uint16_t floatToBf16(float f);
inline float bf16ToFloat(uint16_t b) {
  uint32_t x = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &x, sizeof f);
  return f;
}

}  // namespace bench
