// The reduction arithmetic of one element, written once for the CPU (g++) and CUDA (nvcc): apply<D, Op>(a, b) and
// scale<D>(x, divisor) give bit for bit what kernels::reduce and kernels::scaleDivide give, infinities,
// subnormals, rounding ties and integer wrap-around included. A NaN stays a NaN; which payload it carries is not
// promised: on x86 it is one operand's, chosen by the compiler's operand order (nanResult follows the optimised
// SIMD kernels).
// Device code must be built without -ftz=true / --use_fast_math: float32 subnormals are kept, as on the CPU.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "chorus/chorus.h"

#if defined(__CUDACC__)
#define CHORUS_HD __host__ __device__
#else
#define CHORUS_HD
#endif

namespace chorus::kernels::elem {

template <class To, class From>
CHORUS_HD inline To bitCast(From f) {
  static_assert(sizeof(To) == sizeof(From));
  To t;
  std::memcpy(&t, &f, sizeof t);
  return t;
}

// ---- floating point: the x86 results, spelled out where CUDA's differ ----

template <class F>
using BitsOf = std::conditional_t<sizeof(F) == 4, uint32_t, uint64_t>;
template <class F>
constexpr int kMantBits = sizeof(F) == 4 ? 23 : 52;
template <class F>
constexpr BitsOf<F> kQuietBit = BitsOf<F>(1) << (kMantBits<F> - 1);

template <class F>
CHORUS_HD inline bool isNan(F f) {  // on the bits: immune to fast-math flags
  using U = BitsOf<F>;
  return U(bitCast<U>(f) << 1) > U(~U(0) << (kMantBits<F> + 1));  // exponent all ones, mantissa not zero
}

// The NaN an x86 add/mul/div returns when its result is NaN: a NaN operand, quieted (the first source operand when
// both are, which GCC 12 makes b in every SIMD kernel and in the float32/float64 portable ones; the float16/
// bfloat16 portable kernels return a there), else the default NaN (sign set, quiet, payload 0). CUDA would give
// 0x7fffffff for all of these.
template <class F>
CHORUS_HD inline F nanResult(F a, F b) {
  using U = BitsOf<F>;
  if (isNan(b)) return bitCast<F>(U(bitCast<U>(b) | kQuietBit<F>));
  if (isNan(a)) return bitCast<F>(U(bitCast<U>(a) | kQuietBit<F>));
  return bitCast<F>(U(~U(0) << (kMantBits<F> - 1)));
}

// IEEE round-to-nearest-even operations; the _rn intrinsics are never contracted into an FMA nor approximated.
template <class F>
CHORUS_HD inline F add(F a, F b) {
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(F) == 4) return __fadd_rn(a, b);
  else return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
template <class F>
CHORUS_HD inline F mul(F a, F b) {
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(F) == 4) return __fmul_rn(a, b);
  else return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
template <class F>
CHORUS_HD inline F div(F a, F b) {
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(F) == 4) return __fdiv_rn(a, b);
  else return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}

// ---- float16 / bfloat16 <-> float32 ----

// Exact. A NaN comes back quiet (as vcvtph2ps and the portable kernel do); its payload keeps its place.
CHORUS_HD inline float halfToFloat(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0) return bitCast<float>(bitCast<uint32_t>(float(mant) * 0x1p-24f) | sign);  // exact product
  if (exp == 31) return bitCast<float>(sign | 0x7f800000u | (mant << 13) | (mant ? 0x400000u : 0u));
  return bitCast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

// Round to nearest even, as vcvtps2ph: >= 65520 becomes infinity, a NaN keeps its top 10 payload bits, quieted.
CHORUS_HD inline uint16_t floatToHalf(float f) {
  const uint32_t u = bitCast<uint32_t>(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t x = u & 0x7fffffffu;
  if (x > 0x7f800000u) return uint16_t(sign | 0x7e00u | ((x >> 13) & 0x3ffu));
  if (x >= 0x477ff000u) return uint16_t(sign | 0x7c00u);
  if (x < 0x38800000u) {  // below 2^-14: subnormal or zero
    const uint32_t e = x >> 23;
    if (e < 102) return sign;  // below half the smallest subnormal
    const uint32_t m = (x & 0x7fffffu) | 0x800000u, s = 126 - e;
    const uint32_t r = m >> s, rem = m & ((1u << s) - 1), halfway = 1u << (s - 1);
    return uint16_t(sign | (r + (rem > halfway || (rem == halfway && (r & 1)))));
  }
  const uint32_t r = (x - (112u << 23)) >> 13, rem = x & 0x1fffu;  // a carry into the exponent is still right
  return uint16_t(sign | (r + (rem > 0x1000u || (rem == 0x1000u && (r & 1)))));
}

CHORUS_HD inline float bf16ToFloat(uint16_t h) { return bitCast<float>(uint32_t(h) << 16); }

// Round to nearest even. A NaN is truncated, as the SIMD kernels' rounding leaves every NaN reaching it (a
// signalling one that max/min passed through included; the portable kernel quiets that one), and is quieted
// only if truncation would make it infinity.
CHORUS_HD inline uint16_t floatToBf16(float f) {
  const uint32_t u = bitCast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | ((u & 0x7f0000u) ? 0u : 0x40u));
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// ---- per-datatype element types: S stored, C computed in ----

template <class T>
struct Plain {
  using S = T;
  using C = T;
  CHORUS_HD static C load(S s) { return s; }
  CHORUS_HD static S store(C c) { return c; }
};
struct Half {
  using S = uint16_t;
  using C = float;
  CHORUS_HD static C load(S s) { return halfToFloat(s); }
  CHORUS_HD static S store(C c) { return floatToHalf(c); }
};
struct BHalf {
  using S = uint16_t;
  using C = float;
  CHORUS_HD static C load(S s) { return bf16ToFloat(s); }
  CHORUS_HD static S store(C c) { return floatToBf16(c); }
};

template <chorusDataType_t D>
struct Elem;
template <> struct Elem<chorusInt8> : Plain<int8_t> {};
template <> struct Elem<chorusUint8> : Plain<uint8_t> {};
template <> struct Elem<chorusInt32> : Plain<int32_t> {};
template <> struct Elem<chorusUint32> : Plain<uint32_t> {};
template <> struct Elem<chorusInt64> : Plain<int64_t> {};
template <> struct Elem<chorusUint64> : Plain<uint64_t> {};
template <> struct Elem<chorusFloat16> : Half {};
template <> struct Elem<chorusFloat32> : Plain<float> {};
template <> struct Elem<chorusFloat64> : Plain<double> {};
template <> struct Elem<chorusBfloat16> : BHalf {};

template <chorusDataType_t D>
using Storage = typename Elem<D>::S;
// The datatypes the bitwise ops take.
template <chorusDataType_t D>
constexpr bool kInteger = std::is_integral_v<typename Elem<D>::C>;

// ---- ops on compute values ----

// Integer sum/prod wrap (through the unsigned type: no UB). Max/min are (a > b ? a : b) / (a < b ? a : b) for
// every type, what maxps/minps do: b when either is NaN, and b for +0 against -0. Avg reduces as Sum. Band/Bor/Bxor
// work on the bits of integers only.
template <chorusRedOp_t Op, class C>
CHORUS_HD inline C combine(C a, C b) {
  if constexpr (Op == chorusMax) {
    return a > b ? a : b;
  } else if constexpr (Op == chorusMin) {
    return a < b ? a : b;
  } else if constexpr (Op == chorusBand || Op == chorusBor || Op == chorusBxor) {
    static_assert(std::is_integral_v<C>, "the bitwise ops take integer datatypes only");
    if constexpr (Op == chorusBand) return C(a & b);
    else if constexpr (Op == chorusBor) return C(a | b);
    else return C(a ^ b);
  } else if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    if constexpr (Op == chorusProd) return C(U(U(a) * U(b)));
    else return C(U(U(a) + U(b)));
  } else {
    const C r = Op == chorusProd ? mul(a, b) : add(a, b);
    return isNan(r) ? nanResult(a, b) : r;
  }
}

// Avg's final divide, as scaleDivide: floats divide by float(divisor) (double(divisor) for float64); signed
// integers truncate toward zero as C division, wrapping for -1; unsigned ones divide by the divisor in 64 bits (a
// negative one, never a rank count, converted to the element type first). divisor == 0, or a negative one that
// converts to 0, leaves x as it is.
template <class C>
CHORUS_HD inline C divideBy(C c, int divisor) {
  if constexpr (std::is_floating_point_v<C>) {
    const C r = div(c, C(divisor));
    return isNan(r) ? nanResult(c, C(divisor)) : r;
  } else if constexpr (std::is_signed_v<C>) {
    using U = std::make_unsigned_t<C>;
    return divisor == -1 ? C(U(0) - U(c)) : C(c / divisor);
  } else {
    if (divisor > 0) return C(uint64_t(c) / uint64_t(divisor));
    return C(divisor) == 0 ? c : C(c / C(divisor));
  }
}

// ---- on stored values ----

template <chorusDataType_t D, chorusRedOp_t Op>
CHORUS_HD inline Storage<D> apply(Storage<D> a, Storage<D> b) {
  using E = Elem<D>;
  return E::store(combine<Op>(E::load(a), E::load(b)));
}

template <chorusDataType_t D>
CHORUS_HD inline Storage<D> scale(Storage<D> x, int divisor) {
  using E = Elem<D>;
  return divisor == 0 ? x : E::store(divideBy(E::load(x), divisor));
}

// Host code's dispatch on a datatype: returns f(std::integral_constant<chorusDataType_t, D>{}) for dt's D, and for
// a value outside chorusDataType_t the optional `otherwise` (nothing when f returns void).
template <class F, class... Otherwise>
inline auto withType(chorusDataType_t dt, F&& f, Otherwise... otherwise) {
  switch (dt) {
    case chorusInt8: return f(std::integral_constant<chorusDataType_t, chorusInt8>{});
    case chorusUint8: return f(std::integral_constant<chorusDataType_t, chorusUint8>{});
    case chorusInt32: return f(std::integral_constant<chorusDataType_t, chorusInt32>{});
    case chorusUint32: return f(std::integral_constant<chorusDataType_t, chorusUint32>{});
    case chorusInt64: return f(std::integral_constant<chorusDataType_t, chorusInt64>{});
    case chorusUint64: return f(std::integral_constant<chorusDataType_t, chorusUint64>{});
    case chorusFloat16: return f(std::integral_constant<chorusDataType_t, chorusFloat16>{});
    case chorusFloat32: return f(std::integral_constant<chorusDataType_t, chorusFloat32>{});
    case chorusFloat64: return f(std::integral_constant<chorusDataType_t, chorusFloat64>{});
    case chorusBfloat16: return f(std::integral_constant<chorusDataType_t, chorusBfloat16>{});
  }
  return (otherwise, ...);
}

}  // namespace chorus::kernels::elem
