// Dispatch plus the portable scalar kernels (also the reference the SIMD paths are tested against).
#include "lib/kernels/reduce.h"

#include <atomic>
#include <cstdint>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <cstring>
#include <initializer_list>
#include <type_traits>

#include "lib/kernels/isa_table.h"

namespace chorus::kernels {
namespace {

using detail::IsaTable;

// ---- scalar float16 / bfloat16 conversions (bit-exact with F16C and the SIMD code, NaN payloads aside) ----

float bitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
uint32_t floatToBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

float halfToFloat(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24 is exact in float
    const float f = float(mant) * 0x1p-24f;
    return bitsToFloat(floatToBits(f) | sign);
  }
  if (exp == 31) return bitsToFloat(sign | 0x7f800000u | (mant << 13) | (mant ? 0x400000u : 0u));  // NaN quieted
  return bitsToFloat(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t floatToHalf(float f) {
  const uint32_t u = floatToBits(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t x = u & 0x7fffffffu;
  if (x > 0x7f800000u) return uint16_t(sign | 0x7e00u | ((x >> 13) & 0x3ffu));  // NaN: quiet, keep payload top
  if (x >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // >= 65520 rounds (ties-to-even) to infinity
  if (x < 0x38800000u) {                                  // below 2^-14: half subnormal or zero
    const uint32_t e = x >> 23;
    if (e < 102) return sign;  // below half of the smallest subnormal
    const uint32_t m = (x & 0x7fffffu) | 0x800000u, s = 126 - e;
    uint32_t r = m >> s;
    const uint32_t rem = m & ((1u << s) - 1), halfway = 1u << (s - 1);
    if (rem > halfway || (rem == halfway && (r & 1))) ++r;
    return uint16_t(sign | r);
  }
  uint32_t r = (x - (112u << 23)) >> 13;  // rebias exponent, drop 13 mantissa bits
  const uint32_t rem = x & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1))) ++r;  // a carry into the exponent is still correct
  return uint16_t(sign | r);
}

float bf16ToFloat(uint16_t h) { return bitsToFloat(uint32_t(h) << 16); }

uint16_t floatToBf16(float f) {
  const uint32_t u = floatToBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);  // NaN stays NaN (quiet)
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// ---- portable kernels ----

// S: the stored type, C: the compute type.
template <class T>
struct Plain {
  using S = T;
  using C = T;
  static C load(S s) { return s; }
  static S store(C c) { return c; }
};
struct Half {
  using S = uint16_t;
  using C = float;
  static C load(S s) { return halfToFloat(s); }
  static S store(C c) { return floatToHalf(c); }
};
struct BHalf {
  using S = uint16_t;
  using C = float;
  static C load(S s) { return bf16ToFloat(s); }
  static S store(C c) { return floatToBf16(c); }
};

// Integer sum/prod go through the unsigned type so overflow wraps instead of being undefined.
struct Sum {
  template <class C>
  static C f(C a, C b) {
    if constexpr (std::is_integral_v<C>) return C(std::make_unsigned_t<C>(a) + std::make_unsigned_t<C>(b));
    else return a + b;
  }
};
struct Prod {
  template <class C>
  static C f(C a, C b) {
    if constexpr (std::is_integral_v<C>) return C(std::make_unsigned_t<C>(a) * std::make_unsigned_t<C>(b));
    else return a * b;
  }
};
struct Max {
  template <class C>
  static C f(C a, C b) { return a > b ? a : b; }
};
struct Min {
  template <class C>
  static C f(C a, C b) { return a < b ? a : b; }
};

// Bitwise ops, integer types only (opApplies).
struct Band {
  template <class C>
  static C f(C a, C b) { return C(a & b); }
};
struct Bor {
  template <class C>
  static C f(C a, C b) { return C(a | b); }
};
struct Bxor {
  template <class C>
  static C f(C a, C b) { return C(a ^ b); }
};

template <class Codec, class Op>
void portableReduce(void* dst, const void* a, const void* b, size_t n) {
  using S = typename Codec::S;
  auto* d = static_cast<unsigned char*>(dst);
  const auto* x = static_cast<const unsigned char*>(a);
  const auto* y = static_cast<const unsigned char*>(b);
  // memcpy element access: any alignment. Exact aliasing only ever pairs equal indices, hence ivdep.
#pragma GCC ivdep
  for (size_t i = 0; i < n; ++i) {
    S u, v;
    std::memcpy(&u, x + i * sizeof(S), sizeof(S));
    std::memcpy(&v, y + i * sizeof(S), sizeof(S));
    const S r = Codec::store(Op::f(Codec::load(u), Codec::load(v)));
    std::memcpy(d + i * sizeof(S), &r, sizeof(S));
  }
}

template <class Codec>
void portableScale(void* buf, size_t n, int divisor) {
  using S = typename Codec::S;
  using C = typename Codec::C;
  auto* p = static_cast<unsigned char*>(buf);
  for (size_t i = 0; i < n; ++i) {
    S s;
    std::memcpy(&s, p + i * sizeof(S), sizeof(S));
    C c = Codec::load(s);
    if constexpr (std::is_floating_point_v<C>) {
      c = c / C(divisor);
    } else if constexpr (std::is_signed_v<C>) {
      // x / -1 overflows for the minimum value; negate with wrap-around instead.
      c = divisor == -1 ? C(std::make_unsigned_t<C>(0) - std::make_unsigned_t<C>(c)) : C(c / divisor);
    } else {
      // In 64 bits: converted to a narrow type first, a divisor of 300 ranks became 44 for uint8, and 256 became 0
      // (a division by zero). A negative divisor (never a rank count) keeps C's conversion.
      if (divisor > 0) c = C(uint64_t(c) / uint64_t(divisor));
      else if (C(divisor) != 0) c = C(c / C(divisor));
    }
    s = Codec::store(c);
    std::memcpy(p + i * sizeof(S), &s, sizeof(S));
  }
}

template <class Codec>
constexpr void fillType(IsaTable& t, chorusDataType_t dt) {
  t.reduce[dt][0] = &portableReduce<Codec, Sum>;
  t.reduce[dt][1] = &portableReduce<Codec, Prod>;
  t.reduce[dt][2] = &portableReduce<Codec, Max>;
  t.reduce[dt][3] = &portableReduce<Codec, Min>;
  if constexpr (std::is_integral_v<typename Codec::C>) {
    t.reduce[dt][4] = &portableReduce<Codec, Band>;
    t.reduce[dt][5] = &portableReduce<Codec, Bor>;
    t.reduce[dt][6] = &portableReduce<Codec, Bxor>;
  }
  t.scale[dt] = &portableScale<Codec>;
}

constexpr IsaTable makePortable() {
  IsaTable t{};
  fillType<Plain<int8_t>>(t, chorusInt8);
  fillType<Plain<uint8_t>>(t, chorusUint8);
  fillType<Plain<int32_t>>(t, chorusInt32);
  fillType<Plain<uint32_t>>(t, chorusUint32);
  fillType<Plain<int64_t>>(t, chorusInt64);
  fillType<Plain<uint64_t>>(t, chorusUint64);
  fillType<Half>(t, chorusFloat16);
  fillType<Plain<float>>(t, chorusFloat32);
  fillType<Plain<double>>(t, chorusFloat64);
  fillType<BHalf>(t, chorusBfloat16);
  return t;
}
constinit const IsaTable kPortable = makePortable();

// ---- dispatch ----

struct Isa {
  const char* name;
  const IsaTable* table;  // complete: every entry of an op that applies (opApplies) non-null
};

// Fills the SIMD table's gaps with portable kernels. Only copies pointers: no ISA-specific code runs here.
constexpr IsaTable merged(const IsaTable& simd) {
  IsaTable t = kPortable;
  for (int d = 0; d < detail::kNumTypes; ++d) {
    for (int o = 0; o < detail::kNumOps; ++o)
      if (simd.reduce[d][o]) t.reduce[d][o] = simd.reduce[d][o];
    if (simd.scale[d]) t.scale[d] = simd.scale[d];
  }
  return t;
}

const Isa kPortableIsa{"portable", &kPortable};

#if defined(__x86_64__) || defined(__i386__)
// F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports does not know "f16c".
bool hasF16c() {
  unsigned a, b, c, d;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
}
#endif

const Isa* findIsa(const char* name) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (std::strcmp(name, "avx512") == 0) {
    if (!(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
          __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && hasF16c()))
      return nullptr;
    static const IsaTable table = merged(detail::kAvx512Table);
    static const Isa isa{"avx512", &table};
    return &isa;
  }
  if (std::strcmp(name, "avx2") == 0) {
    if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && hasF16c()))
      return nullptr;
    static const IsaTable table = merged(detail::kAvx2Table);
    static const Isa isa{"avx2", &table};
    return &isa;
  }
#endif
  if (std::strcmp(name, "portable") == 0) return &kPortableIsa;
  return nullptr;
}

const Isa* detect() {
  for (const char* name : {"avx512", "avx2"})
    if (const Isa* isa = findIsa(name)) return isa;
  return &kPortableIsa;
}

std::atomic<const Isa*> g_active{nullptr};

const Isa& active() {
  const Isa* isa = g_active.load(std::memory_order_acquire);
  if (!isa) {  // racing first calls all detect the same answer, so a plain store is fine
    isa = detect();
    g_active.store(isa, std::memory_order_release);
  }
  return *isa;
}

// The table's column: avg reduces as sum, and the bitwise ops follow min.
int opIndex(chorusRedOp_t op) { return op == chorusAvg ? 0 : op > chorusAvg ? int(op) - 1 : int(op); }

// ---- conversion between floating-point types (DDP's gradient compression) ----

template <class Codec>
struct Wide {  // a stored element as a double and back
  using S = typename Codec::S;
  static double load(const unsigned char* p) {
    S s;
    std::memcpy(&s, p, sizeof s);
    return static_cast<double>(Codec::load(s));
  }
  static void store(unsigned char* p, double v) {
    const S s = Codec::store(static_cast<typename Codec::C>(v));
    std::memcpy(p, &s, sizeof s);
  }
};

template <class From, class To>
void convertLoop(void* dst, const void* src, size_t n, double divisor) {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  for (size_t i = 0; i < n; ++i)
    Wide<To>::store(d + i * sizeof(typename To::S), Wide<From>::load(s + i * sizeof(typename From::S)) / divisor);
}

template <class From>
bool convertFrom(void* dst, chorusDataType_t to, const void* src, size_t n, double divisor) {
  switch (to) {
    case chorusFloat16: convertLoop<From, Half>(dst, src, n, divisor); return true;
    case chorusBfloat16: convertLoop<From, BHalf>(dst, src, n, divisor); return true;
    case chorusFloat32: convertLoop<From, Plain<float>>(dst, src, n, divisor); return true;
    case chorusFloat64: convertLoop<From, Plain<double>>(dst, src, n, divisor); return true;
    default: return false;
  }
}

}  // namespace

bool dataTypeValid(chorusDataType_t dt) { return dataTypeSize(dt) != 0; }

bool redOpValid(chorusRedOp_t op) { return int(op) >= int(chorusSum) && int(op) < int(chorusNumOps); }

const char* dataTypeName(chorusDataType_t dt) {
  static const char* const kNames[] = {"int8",    "uint8",   "int32",   "uint32",  "int64",
                                       "uint64",  "float16", "float32", "float64", "bfloat16"};
  return dataTypeValid(dt) ? kNames[dt] : "unknown";
}

const char* redOpName(chorusRedOp_t op) {
  static const char* const kNames[] = {"sum", "prod", "max", "min", "avg", "band", "bor", "bxor"};
  return redOpValid(op) ? kNames[op] : "unknown";
}

void reduce(void* dst, const void* a, const void* b, size_t count, chorusDataType_t dt, chorusRedOp_t op) {
  if (count == 0 || !opApplies(op, dt)) return;
  active().table->reduce[dt][opIndex(op)](dst, a, b, count);
}

void scaleDivide(void* buf, size_t count, chorusDataType_t dt, int divisor) {
  if (count == 0 || divisor == 0 || !dataTypeValid(dt)) return;
  active().table->scale[dt](buf, count, divisor);
}

bool convert(void* dst, chorusDataType_t to, const void* src, chorusDataType_t from, size_t count, double divisor) {
  switch (from) {
    case chorusFloat16: return convertFrom<Half>(dst, to, src, count, divisor);
    case chorusBfloat16: return convertFrom<BHalf>(dst, to, src, count, divisor);
    case chorusFloat32: return convertFrom<Plain<float>>(dst, to, src, count, divisor);
    case chorusFloat64: return convertFrom<Plain<double>>(dst, to, src, count, divisor);
    default: return false;
  }
}

const char* activeIsa() { return active().name; }

bool forceIsa(const char* name) {
  if (!name) return false;
  const Isa* isa = std::strcmp(name, "auto") == 0 ? detect() : findIsa(name);
  if (!isa) return false;
  g_active.store(isa, std::memory_order_release);
  return true;
}

}  // namespace chorus::kernels
