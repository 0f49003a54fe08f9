// AVX2 + F16C kernels (built with -mavx2 -mfma -mf16c). Only reached after reduce.cc checked CPUID.
// No inline functions with external linkage are used here (see simd_loop.h for why).
#include <immintrin.h>

#include <cstdint>

#include "lib/kernels/isa_table.h"
#include "lib/kernels/simd_loop.h"

namespace chorus::kernels::detail {
namespace {

// ---- codecs: memory <-> compute register ----

template <size_t E>
struct IntCodec {
  using V = __m256i;
  static constexpr size_t kElem = E, kBytes = 32;
  static V load(const unsigned char* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static void store(unsigned char* p, V v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }
  static void stream(unsigned char* p, V v) { _mm256_stream_si256(reinterpret_cast<__m256i*>(p), v); }
};
struct F32Codec {
  using V = __m256;
  static constexpr size_t kElem = 4, kBytes = 32;
  static V load(const unsigned char* p) { return _mm256_loadu_ps(reinterpret_cast<const float*>(p)); }
  static void store(unsigned char* p, V v) { _mm256_storeu_ps(reinterpret_cast<float*>(p), v); }
  static void stream(unsigned char* p, V v) { _mm256_stream_ps(reinterpret_cast<float*>(p), v); }
};
struct F64Codec {
  using V = __m256d;
  static constexpr size_t kElem = 8, kBytes = 32;
  static V load(const unsigned char* p) { return _mm256_loadu_pd(reinterpret_cast<const double*>(p)); }
  static void store(unsigned char* p, V v) { _mm256_storeu_pd(reinterpret_cast<double*>(p), v); }
  static void stream(unsigned char* p, V v) { _mm256_stream_pd(reinterpret_cast<double*>(p), v); }
};
// 8 halves <-> 8 floats through F16C; the store rounds to nearest even.
struct F16Codec {
  using V = __m256;
  static constexpr size_t kElem = 2, kBytes = 16;
  static V load(const unsigned char* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static void store(unsigned char* p, V v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  static void stream(unsigned char* p, V v) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
};
struct F32Pair {
  __m256 lo, hi;
};

// bfloat16 is the top half of a float32. Even elements are shifted up into float position, odd ones are
// already there once the low half is masked off: no shuffles. Every op is element-wise, so the split
// order is harmless as long as store() undoes it.
struct Bf16Codec {
  using V = F32Pair;  // lo: even elements, hi: odd elements
  static constexpr size_t kElem = 2, kBytes = 32;
  static V load(const unsigned char* p) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return {_mm256_castsi256_ps(_mm256_slli_epi32(v, 16)),
            _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(-65536)))};  // 0xffff0000
  }
  // Round to nearest even into the upper 16 bits. A NaN stays a NaN without a special case: every float
  // reaching here is a bfloat16 input, the finite divisor, or an SSE result of those, and x86 NaN results are
  // the default NaN or an operand NaN (maybe quieted), all with a zero low half, so the increment never carries.
  static __m256i round(__m256 f) {
    const __m256i x = _mm256_castps_si256(f);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
    return _mm256_add_epi32(x, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
  }
  static __m256i pack(V v) { return _mm256_blend_epi16(_mm256_srli_epi32(round(v.lo), 16), round(v.hi), 0xAA); }
  static void store(unsigned char* p, V v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), pack(v)); }
  static void stream(unsigned char* p, V v) { _mm256_stream_si256(reinterpret_cast<__m256i*>(p), pack(v)); }
};

// ---- ops ----

struct FAdd {
  static __m256 f(__m256 a, __m256 b) { return _mm256_add_ps(a, b); }
  static __m256d f(__m256d a, __m256d b) { return _mm256_add_pd(a, b); }
};
struct FMul {
  static __m256 f(__m256 a, __m256 b) { return _mm256_mul_ps(a, b); }
  static __m256d f(__m256d a, __m256d b) { return _mm256_mul_pd(a, b); }
};
// maxps(a, b) is exactly (a > b ? a : b), minps(a, b) is (a < b ? a : b): the portable semantics.
struct FMax {
  static __m256 f(__m256 a, __m256 b) { return _mm256_max_ps(a, b); }
  static __m256d f(__m256d a, __m256d b) { return _mm256_max_pd(a, b); }
};
struct FMin {
  static __m256 f(__m256 a, __m256 b) { return _mm256_min_ps(a, b); }
  static __m256d f(__m256d a, __m256d b) { return _mm256_min_pd(a, b); }
};
struct FDiv {
  static __m256 f(__m256 a, __m256 b) { return _mm256_div_ps(a, b); }
  static __m256d f(__m256d a, __m256d b) { return _mm256_div_pd(a, b); }
};

template <size_t E>
struct IAdd {
  static __m256i f(__m256i a, __m256i b) {
    if constexpr (E == 1) return _mm256_add_epi8(a, b);
    else if constexpr (E == 4) return _mm256_add_epi32(a, b);
    else return _mm256_add_epi64(a, b);
  }
};

template <size_t E>
struct IMul {
  static __m256i f(__m256i a, __m256i b) {
    if constexpr (E == 1) {
      // No 8-bit multiply: multiply even and odd bytes as 16-bit lanes and keep each low byte.
      const __m256i even = _mm256_mullo_epi16(a, b);
      const __m256i odd = _mm256_mullo_epi16(_mm256_srli_epi16(a, 8), _mm256_srli_epi16(b, 8));
      return _mm256_or_si256(_mm256_and_si256(even, _mm256_set1_epi16(0xff)), _mm256_slli_epi16(odd, 8));
    } else if constexpr (E == 4) {
      return _mm256_mullo_epi32(a, b);
    } else {
      // Low 64 bits of a*b = lo*lo + ((hi_a*lo_b + lo_a*hi_b) << 32).
      const __m256i cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), b),
                                             _mm256_mul_epu32(a, _mm256_srli_epi64(b, 32)));
      return _mm256_add_epi64(_mm256_mul_epu32(a, b), _mm256_slli_epi64(cross, 32));
    }
  }
};

// a > b per lane as all-ones masks, for 64-bit lanes only (AVX2 has no 64-bit max/min).
template <bool Signed>
__m256i gt64(__m256i a, __m256i b) {
  if constexpr (Signed) return _mm256_cmpgt_epi64(a, b);
  const __m256i bias = _mm256_set1_epi64x(INT64_MIN);
  return _mm256_cmpgt_epi64(_mm256_xor_si256(a, bias), _mm256_xor_si256(b, bias));
}

template <size_t E, bool Signed>
struct IMax {
  static __m256i f(__m256i a, __m256i b) {
    if constexpr (E == 1) return Signed ? _mm256_max_epi8(a, b) : _mm256_max_epu8(a, b);
    else if constexpr (E == 4) return Signed ? _mm256_max_epi32(a, b) : _mm256_max_epu32(a, b);
    else return _mm256_blendv_epi8(b, a, gt64<Signed>(a, b));
  }
};
template <size_t E, bool Signed>
struct IMin {
  static __m256i f(__m256i a, __m256i b) {
    if constexpr (E == 1) return Signed ? _mm256_min_epi8(a, b) : _mm256_min_epu8(a, b);
    else if constexpr (E == 4) return Signed ? _mm256_min_epi32(a, b) : _mm256_min_epu32(a, b);
    else return _mm256_blendv_epi8(a, b, gt64<Signed>(a, b));
  }
};

// Bitwise ops: the same for every element width.
struct IAnd {
  static __m256i f(__m256i a, __m256i b) { return _mm256_and_si256(a, b); }
};
struct IOr {
  static __m256i f(__m256i a, __m256i b) { return _mm256_or_si256(a, b); }
};
struct IXor {
  static __m256i f(__m256i a, __m256i b) { return _mm256_xor_si256(a, b); }
};

template <class Codec>
void scaleFloat(void* buf, size_t n, int divisor) {
  if constexpr (Codec::kElem == 8) scaleLoop<Codec, FDiv>(buf, n, _mm256_set1_pd(double(divisor)));
  else scaleLoop<Codec, FDiv>(buf, n, _mm256_set1_ps(float(divisor)));
}

template <size_t E, bool Signed>
constexpr void fillInt(IsaTable& t, chorusDataType_t dt) {
  t.reduce[dt][0] = &binaryLoop<IntCodec<E>, IAdd<E>>;
  t.reduce[dt][1] = &binaryLoop<IntCodec<E>, IMul<E>>;
  t.reduce[dt][2] = &binaryLoop<IntCodec<E>, IMax<E, Signed>>;
  t.reduce[dt][3] = &binaryLoop<IntCodec<E>, IMin<E, Signed>>;
  t.reduce[dt][4] = &binaryLoop<IntCodec<E>, IAnd>;
  t.reduce[dt][5] = &binaryLoop<IntCodec<E>, IOr>;
  t.reduce[dt][6] = &binaryLoop<IntCodec<E>, IXor>;
}

template <class Codec>
constexpr void fillFloat(IsaTable& t, chorusDataType_t dt) {
  t.reduce[dt][0] = &binaryLoop<Codec, FAdd>;
  t.reduce[dt][1] = &binaryLoop<Codec, FMul>;
  t.reduce[dt][2] = &binaryLoop<Codec, FMax>;
  t.reduce[dt][3] = &binaryLoop<Codec, FMin>;
  t.scale[dt] = &scaleFloat<Codec>;
}

constexpr IsaTable makeTable() {
  IsaTable t{};
  fillInt<1, true>(t, chorusInt8);
  fillInt<1, false>(t, chorusUint8);
  fillInt<4, true>(t, chorusInt32);
  fillInt<4, false>(t, chorusUint32);
  fillInt<8, true>(t, chorusInt64);
  fillInt<8, false>(t, chorusUint64);
  fillFloat<F16Codec>(t, chorusFloat16);
  fillFloat<F32Codec>(t, chorusFloat32);
  fillFloat<F64Codec>(t, chorusFloat64);
  fillFloat<Bf16Codec>(t, chorusBfloat16);
  return t;  // integer scaleDivide stays portable: there is no SIMD integer division
}

}  // namespace

constinit const IsaTable kAvx2Table = makeTable();

}  // namespace chorus::kernels::detail
