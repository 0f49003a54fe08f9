// CPU reduction kernels with runtime ISA dispatch (AVX-512 / AVX2 / portable scalar).
#pragma once

#include "chorus/chorus.h"

#include <cstddef>
#include <cstdint>

namespace chorus::kernels {

// 0 for an unknown value. Inline: every operation asks it several times.
inline size_t dataTypeSize(chorusDataType_t dt) {
  switch (dt) {
    case chorusInt8: case chorusUint8: return 1;
    case chorusFloat16: case chorusBfloat16: return 2;
    case chorusInt32: case chorusUint32: case chorusFloat32: return 4;
    case chorusInt64: case chorusUint64: case chorusFloat64: return 8;
  }
  return 0;
}
bool dataTypeValid(chorusDataType_t dt);
bool redOpValid(chorusRedOp_t op);  // a built-in op: chorusSum .. chorusBxor
const char* dataTypeName(chorusDataType_t dt);  // "int8" ... "bfloat16"; "unknown" otherwise
const char* redOpName(chorusRedOp_t op);        // "sum", "prod", "max", "min", "avg", "band", "bor", "bxor"; "unknown"
inline bool isInteger(chorusDataType_t dt) { return int(dt) >= int(chorusInt8) && int(dt) <= int(chorusUint64); }
inline bool isBitwise(chorusRedOp_t op) { return op == chorusBand || op == chorusBor || op == chorusBxor; }
// Whether reduce computes op for dt: every built-in op for integers, all but the bitwise ones for the others.
inline bool opApplies(chorusRedOp_t op, chorusDataType_t dt) {
  return redOpValid(op) && dataTypeValid(dt) && (!isBitwise(op) || isInteger(dt));
}

// dst[i] = a[i] op b[i] for i < count. dst may alias a or b exactly (same pointer); any alignment.
// chorusAvg reduces like chorusSum (the caller divides at the end with scaleDivide, or, for float16 and bfloat16,
// pre-multiplied the inputs by avgScalar).
// Integers wrap; float16/bfloat16 compute in float32 and round to nearest even when storing.
// Max/min of floats: (a > b ? a : b) / (a < b ? a : b). Band/bor/bxor: on the bits, integers only. An invalid
// dt/op, or one that does not apply (opApplies): no-op (callers validate first).
void reduce(void* dst, const void* a, const void* b, size_t count, chorusDataType_t dt, chorusRedOp_t op);

// buf[i] = buf[i] / divisor (Avg's final step). Integers truncate toward zero as C division (unsigned types
// convert divisor as C does); float16/bfloat16 via float32. divisor == 0: no-op.
void scaleDivide(void* buf, size_t count, chorusDataType_t dt, int divisor);

// dst[i] = src[i] * scalar (PreMulSum's first step; scalar: one element of dt), rounded as reduce's chorusProd:
// integers wrap, float16/bfloat16 compute in float32. dst may be src; any alignment. Invalid dt: no-op.
void multiply(void* dst, const void* src, size_t count, chorusDataType_t dt, const void* scalar);

// The bytes of float(1.0 / nranks) rounded to dt (float16 or bfloat16), in the low bytes: the scalar that Avg of
// those types pre-multiplies by (Note [PreMulSum], lib/comm/collectives.cc). 0 for other types.
uint64_t avgScalar(chorusDataType_t dt, int nranks);

// dst[i] = src[i] / divisor, converted between floating-point types (float16, bfloat16, float32, float64;
// computed in double, rounded to nearest even when narrowing). dst and src must not overlap. False (nothing
// written) for other types.
bool convert(void* dst, chorusDataType_t to, const void* src, chorusDataType_t from, size_t count,
             double divisor = 1.0);

// "avx512", "avx2" or "portable": the path chosen at first use from CPUID.
const char* activeIsa();
// Forces a path for tests and benchmarks: "portable", "avx2", "avx512", or "auto" to redo detection.
// Returns false (and changes nothing) if the CPU or this build lacks it.
bool forceIsa(const char* name);

}  // namespace chorus::kernels
