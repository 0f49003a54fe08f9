// AVX-512 (F/BW/VL/DQ) + F16C kernels. Only reached after reduce.cc checked CPUID.
// No inline functions with external linkage are used here (see simd_loop.h for why).
// GCC 12 warns inside its own AVX-512 headers (_mm512_undefined_*, GCC PR 105593); the pragma must cover
// the header's text, where the warning is located after inlining.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <cstdint>

#include "lib/kernels/isa_table.h"
#include "lib/kernels/simd_loop.h"

namespace chorus::kernels::detail {
namespace {

// ---- codecs: memory <-> compute register ----

template <size_t E>
struct IntCodec {
  using V = __m512i;
  static constexpr size_t kElem = E, kBytes = 64;
  static V load(const unsigned char* p) { return _mm512_loadu_si512(p); }
  static void store(unsigned char* p, V v) { _mm512_storeu_si512(p, v); }
  static void stream(unsigned char* p, V v) { _mm512_stream_si512(reinterpret_cast<__m512i*>(p), v); }
};
struct F32Codec {
  using V = __m512;
  static constexpr size_t kElem = 4, kBytes = 64;
  static V load(const unsigned char* p) { return _mm512_loadu_ps(p); }
  static void store(unsigned char* p, V v) { _mm512_storeu_ps(p, v); }
  static void stream(unsigned char* p, V v) { _mm512_stream_ps(reinterpret_cast<float*>(p), v); }
};
struct F64Codec {
  using V = __m512d;
  static constexpr size_t kElem = 8, kBytes = 64;
  static V load(const unsigned char* p) { return _mm512_loadu_pd(p); }
  static void store(unsigned char* p, V v) { _mm512_storeu_pd(p, v); }
  static void stream(unsigned char* p, V v) { _mm512_stream_pd(reinterpret_cast<double*>(p), v); }
};
// 16 halves <-> 16 floats; the store rounds to nearest even.
struct F16Codec {
  using V = __m512;
  static constexpr size_t kElem = 2, kBytes = 32;
  static V load(const unsigned char* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static void store(unsigned char* p, V v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  static void stream(unsigned char* p, V v) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
};
struct F32Pair {
  __m512 lo, hi;
};

// bfloat16 is the top half of a float32. Even elements are shifted up into float position, odd ones are
// already there once the low half is masked off: no shuffles. Every op is element-wise, so the split
// order is harmless as long as store() undoes it. (AVX512_BF16's vcvtneps2bf16 is not used: it is outside
// the required feature set and flushes denormals.)
struct Bf16Codec {
  using V = F32Pair;  // lo: even elements, hi: odd elements
  static constexpr size_t kElem = 2, kBytes = 64;
  static V load(const unsigned char* p) {
    const __m512i v = _mm512_loadu_si512(p);
    return {_mm512_castsi512_ps(_mm512_slli_epi32(v, 16)),
            _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(-65536)))};  // 0xffff0000
  }
  // Round to nearest even into the upper 16 bits. A NaN stays a NaN without a special case: every float
  // reaching here is a bfloat16 input, the finite divisor, or an SSE result of those, and x86 NaN results are
  // the default NaN or an operand NaN (maybe quieted), all with a zero low half, so the increment never carries.
  static __m512i round(__m512 f) {
    const __m512i x = _mm512_castps_si512(f);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
    return _mm512_add_epi32(x, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
  }
  static __m512i pack(V v) {
    return _mm512_mask_blend_epi16(__mmask32(0xAAAAAAAAu), _mm512_srli_epi32(round(v.lo), 16), round(v.hi));
  }
  static void store(unsigned char* p, V v) { _mm512_storeu_si512(p, pack(v)); }
  static void stream(unsigned char* p, V v) { _mm512_stream_si512(reinterpret_cast<__m512i*>(p), pack(v)); }
};

// ---- ops ----

struct FAdd {
  static __m512 f(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }
  static __m512d f(__m512d a, __m512d b) { return _mm512_add_pd(a, b); }
};
struct FMul {
  static __m512 f(__m512 a, __m512 b) { return _mm512_mul_ps(a, b); }
  static __m512d f(__m512d a, __m512d b) { return _mm512_mul_pd(a, b); }
};
// vmaxps(a, b) is exactly (a > b ? a : b), vminps(a, b) is (a < b ? a : b): the portable semantics.
struct FMax {
  static __m512 f(__m512 a, __m512 b) { return _mm512_max_ps(a, b); }
  static __m512d f(__m512d a, __m512d b) { return _mm512_max_pd(a, b); }
};
struct FMin {
  static __m512 f(__m512 a, __m512 b) { return _mm512_min_ps(a, b); }
  static __m512d f(__m512d a, __m512d b) { return _mm512_min_pd(a, b); }
};
struct FDiv {
  static __m512 f(__m512 a, __m512 b) { return _mm512_div_ps(a, b); }
  static __m512d f(__m512d a, __m512d b) { return _mm512_div_pd(a, b); }
};

template <size_t E>
struct IAdd {
  static __m512i f(__m512i a, __m512i b) {
    if constexpr (E == 1) return _mm512_add_epi8(a, b);
    else if constexpr (E == 4) return _mm512_add_epi32(a, b);
    else return _mm512_add_epi64(a, b);
  }
};

template <size_t E>
struct IMul {
  static __m512i f(__m512i a, __m512i b) {
    if constexpr (E == 1) {
      // No 8-bit multiply: multiply even and odd bytes as 16-bit lanes and keep each low byte.
      const __m512i even = _mm512_mullo_epi16(a, b);
      const __m512i odd = _mm512_mullo_epi16(_mm512_srli_epi16(a, 8), _mm512_srli_epi16(b, 8));
      return _mm512_mask_blend_epi8(__mmask64(0xAAAAAAAAAAAAAAAAull), even, _mm512_slli_epi16(odd, 8));
    } else if constexpr (E == 4) {
      return _mm512_mullo_epi32(a, b);
    } else {
      return _mm512_mullo_epi64(a, b);
    }
  }
};

template <size_t E, bool Signed>
struct IMax {
  static __m512i f(__m512i a, __m512i b) {
    if constexpr (E == 1) return Signed ? _mm512_max_epi8(a, b) : _mm512_max_epu8(a, b);
    else if constexpr (E == 4) return Signed ? _mm512_max_epi32(a, b) : _mm512_max_epu32(a, b);
    else return Signed ? _mm512_max_epi64(a, b) : _mm512_max_epu64(a, b);
  }
};
template <size_t E, bool Signed>
struct IMin {
  static __m512i f(__m512i a, __m512i b) {
    if constexpr (E == 1) return Signed ? _mm512_min_epi8(a, b) : _mm512_min_epu8(a, b);
    else if constexpr (E == 4) return Signed ? _mm512_min_epi32(a, b) : _mm512_min_epu32(a, b);
    else return Signed ? _mm512_min_epi64(a, b) : _mm512_min_epu64(a, b);
  }
};

// Bitwise ops: the same for every element width.
struct IAnd {
  static __m512i f(__m512i a, __m512i b) { return _mm512_and_si512(a, b); }
};
struct IOr {
  static __m512i f(__m512i a, __m512i b) { return _mm512_or_si512(a, b); }
};
struct IXor {
  static __m512i f(__m512i a, __m512i b) { return _mm512_xor_si512(a, b); }
};

template <class Codec>
void scaleFloat(void* buf, size_t n, int divisor) {
  if constexpr (Codec::kElem == 8) scaleLoop<Codec, FDiv>(buf, n, _mm512_set1_pd(double(divisor)));
  else scaleLoop<Codec, FDiv>(buf, n, _mm512_set1_ps(float(divisor)));
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

constinit const IsaTable kAvx512Table = makeTable();

}  // namespace chorus::kernels::detail
