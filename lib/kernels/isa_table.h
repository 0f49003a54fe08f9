// Internal: the per-ISA kernel tables that reduce.cc dispatches through.
#pragma once

#include <cstddef>

#include "chorus/chorus.h"

namespace chorus::kernels::detail {

using ReduceFn = void (*)(void* dst, const void* a, const void* b, size_t count);
using ScaleFn = void (*)(void* buf, size_t count, int divisor);

constexpr int kNumTypes = 10;  // chorusInt8 .. chorusBfloat16
constexpr int kNumOps = 7;     // sum, prod, max, min, band, bor, bxor (avg reduces as sum)

// A null entry means "use the portable kernel" (which has none for the bitwise ops of floating-point types).
struct IsaTable {
  ReduceFn reduce[kNumTypes][kNumOps];
  ScaleFn scale[kNumTypes];
};

// Constant-initialised so that no code compiled for a wider ISA runs before the CPU check.
#if defined(__x86_64__) || defined(__i386__)
extern const IsaTable kAvx2Table;
extern const IsaTable kAvx512Table;
#endif

}  // namespace chorus::kernels::detail
