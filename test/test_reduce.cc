// Reduction kernels: the portable path against an independent reference, then every SIMD path, alias pattern
// and misalignment against the portable path bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "lib/kernels/reduce.h"
#include "test/isas.h"

using namespace chorus::kernels;
using chorus::test::availableIsas;
using chorus::test::IsaGuard;
using chorus::test::kOps;
using chorus::test::kTypes;
using chorus::test::typeOpPairs;

namespace {

const size_t kCounts[] = {0, 1, 3, 7, 15, 16, 17, 31, 33, 63, 64, 65, 1000, 1000003};

template <class T>
T get(const unsigned char* p, size_t i) {
  T v;
  std::memcpy(&v, p + i * sizeof(T), sizeof(T));
  return v;
}

// ---- independent decoding of the 16-bit float formats ----

double halfToDouble(uint16_t h) {
  const int e = (h >> 10) & 31, m = h & 1023;
  const double v = e == 31 ? (m ? NAN : INFINITY) : e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  return (h & 0x8000) ? -v : v;
}
double bf16ToDouble(uint16_t h) {
  const int e = (h >> 7) & 255, m = h & 127;
  const double v = e == 255 ? (m ? NAN : INFINITY) : e == 0 ? std::ldexp(m, -133) : std::ldexp(128 + m, e - 134);
  return (h & 0x8000) ? -v : v;
}

struct Fmt16 {
  double (*dec)(uint16_t);
  uint16_t inf;     // bits of +infinity
  double overflow;  // |x| >= this rounds to infinity
};
const Fmt16 kHalf{halfToDouble, 0x7c00, 65520.0};
const Fmt16 kBf16{bf16ToDouble, 0x7f80, std::ldexp(511.0, 119)};

// True when r is ref rounded to nearest, ties to even: no neighbour of r is closer to ref.
bool isNearest(uint16_t r, double ref, const Fmt16& f) {
  const double rv = f.dec(r);
  if (std::isnan(ref)) return std::isnan(rv);
  if (std::fabs(ref) >= f.overflow) return std::isinf(rv) && std::signbit(rv) == std::signbit(ref);
  if (!std::isfinite(rv)) return false;
  if (rv == 0 && std::signbit(rv) != std::signbit(ref)) return false;
  const uint16_t sign = r & 0x8000, mag = r & 0x7fff;
  auto beats = [&](uint16_t c) {
    const double dr = std::fabs(rv - ref), dc = std::fabs(f.dec(c) - ref);
    return dr < dc || (dr == dc && (r & 1) == 0);
  };
  if (mag > 0 && !beats(uint16_t(sign | (mag - 1)))) return false;
  if (mag + 1 < f.inf && !beats(uint16_t(sign | (mag + 1)))) return false;
  return mag != 0 || beats(uint16_t((sign ^ 0x8000) | 1));
}

// |r - ref| <= one unit in the last place of the format at ref.
bool withinUlp(uint16_t r, double ref, const Fmt16& f, int mantBits, int minExp) {
  const double rv = f.dec(r);
  if (!std::isfinite(ref)) return std::isnan(ref) ? std::isnan(rv) : rv == ref;
  const int e = ref == 0 ? minExp : std::max(std::ilogb(ref), minExp);
  return std::fabs(rv - ref) <= std::ldexp(1.0, e - mantBits);
}

// ---- reference reduction, one element ----

template <class T>
bool intOk(chorusRedOp_t op, const unsigned char* a, const unsigned char* b, const unsigned char* r, size_t i) {
  using U = std::make_unsigned_t<T>;
  const T x = get<T>(a, i), y = get<T>(b, i);
  T want;
  switch (op) {
    case chorusProd: want = T(U(U(x) * U(y))); break;
    case chorusMax: want = x > y ? x : y; break;
    case chorusMin: want = x < y ? x : y; break;
    case chorusBand: want = T(x & y); break;
    case chorusBor: want = T(x | y); break;
    case chorusBxor: want = T(x ^ y); break;
    default: want = T(U(U(x) + U(y))); break;
  }
  return get<T>(r, i) == want;
}

template <class T>
bool floatOk(chorusRedOp_t op, const unsigned char* a, const unsigned char* b, const unsigned char* r, size_t i) {
  const double x = get<T>(a, i), y = get<T>(b, i);
  double want;
  switch (op) {
    case chorusProd: want = x * y; break;
    case chorusMax: want = x > y ? x : y; break;
    case chorusMin: want = x < y ? x : y; break;
    default: want = x + y; break;
  }
  const T w = T(want), got = get<T>(r, i);  // rounding via double is exact: 53 >= 2 * 24 + 2
  return std::memcmp(&w, &got, sizeof(T)) == 0;
}

bool fmt16Ok(chorusRedOp_t op, const Fmt16& f, const unsigned char* a, const unsigned char* b,
             const unsigned char* r, size_t i) {
  const uint16_t ha = get<uint16_t>(a, i), hb = get<uint16_t>(b, i), hr = get<uint16_t>(r, i);
  const double x = f.dec(ha), y = f.dec(hb);
  switch (op) {
    case chorusMax: return hr == (x > y ? ha : hb);
    case chorusMin: return hr == (x < y ? ha : hb);
    case chorusProd: return isNearest(hr, x * y, f);
    default: return isNearest(hr, x + y, f);
  }
}

bool elemOk(chorusDataType_t dt, chorusRedOp_t op, const unsigned char* a, const unsigned char* b,
            const unsigned char* r, size_t i) {
  switch (dt) {
    case chorusInt8: return intOk<int8_t>(op, a, b, r, i);
    case chorusUint8: return intOk<uint8_t>(op, a, b, r, i);
    case chorusInt32: return intOk<int32_t>(op, a, b, r, i);
    case chorusUint32: return intOk<uint32_t>(op, a, b, r, i);
    case chorusInt64: return intOk<int64_t>(op, a, b, r, i);
    case chorusUint64: return intOk<uint64_t>(op, a, b, r, i);
    case chorusFloat16: return fmt16Ok(op, kHalf, a, b, r, i);
    case chorusFloat32: return floatOk<float>(op, a, b, r, i);
    case chorusFloat64: return floatOk<double>(op, a, b, r, i);
    case chorusBfloat16: return fmt16Ok(op, kBf16, a, b, r, i);
  }
  return false;
}

// splitmix64: cheap, and plenty random for test data.
struct Rng {
  uint64_t s;
  uint64_t operator()() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
};

// Random bit patterns into v; float types get any finite value (subnormals and near-overflow included).
void randomData(std::vector<unsigned char>& v, chorusDataType_t dt, size_t count, uint64_t seed) {
  Rng rng{seed};
  const size_t es = dataTypeSize(dt);
  v.resize(count * es);
  const uint64_t expMask = dt == chorusFloat16 ? 0x7c00 : dt == chorusBfloat16 ? 0x7f80
                           : dt == chorusFloat32 ? 0x7f800000 : dt == chorusFloat64 ? 0x7ff0000000000000ull : 0;
  for (size_t i = 0; i < count; ++i) {
    uint64_t bits = rng();
    while (expMask && (bits & expMask) == expMask) bits = rng();
    std::memcpy(v.data() + i * es, &bits, es);
  }
}

// Reusable memory holding `bytes` at a chosen offset (to misalign on purpose) between two canary zones.
// Shared by all tests: fresh multi-megabyte allocations would spend the test's time in page faults.
struct Arena {
  static constexpr size_t kPad = 64;
  std::vector<unsigned char> mem;
  size_t off = 0, bytes = 0;
  // Copies init (or, when init is null, fills with 0x5A: a destination that must be overwritten everywhere).
  unsigned char* load(const unsigned char* init, size_t n, size_t offset) {
    if (mem.size() < n + 2 * kPad + 16) mem.resize(n + 2 * kPad + 16);
    off = kPad + offset, bytes = n;
    std::memset(mem.data(), 0xA5, off);
    if (n) init ? (void)std::memcpy(mem.data() + off, init, n) : (void)std::memset(mem.data() + off, 0x5A, n);
    std::memset(mem.data() + off + n, 0xA5, kPad);
    return p();
  }
  unsigned char* load(const std::vector<unsigned char>& init, size_t offset) {
    return load(init.data(), init.size(), offset);
  }
  unsigned char* p() { return mem.data() + off; }
  bool guardsIntact() const {
    for (size_t i = 0; i < off; ++i)
      if (mem[i] != 0xA5) return false;
    for (size_t i = off + bytes; i < off + bytes + kPad; ++i)
      if (mem[i] != 0xA5) return false;
    return true;
  }
};
Arena& arena(int i) {
  static Arena a[4];
  return a[i];
}
std::vector<unsigned char>& scratch(int i) {
  static std::vector<unsigned char> v[3];
  return v[i];
}

class ReduceTest : public ::testing::TestWithParam<std::pair<chorusDataType_t, chorusRedOp_t>> {};

TEST_P(ReduceTest, AllIsasAliasesAlignments) {
  IsaGuard guard;
  const auto [dt, op] = GetParam();
  const size_t es = dataTypeSize(dt);
  const auto isas = availableIsas();
  Arena &ga = arena(0), &gb = arena(1), &gd = arena(2);
  auto &a = scratch(0), &b = scratch(1), &want = scratch(2);
  for (size_t count : kCounts) {
    SCOPED_TRACE("count=" + std::to_string(count));
    randomData(a, dt, count, count * 131 + unsigned(dt) * 7 + unsigned(op));
    randomData(b, dt, count, count * 977 + unsigned(dt) * 5 + unsigned(op) + 1);
    // Portable, separate aligned buffers, against the independent reference.
    want.resize(count * es);
    ASSERT_TRUE(forceIsa("portable"));
    reduce(want.data(), a.data(), b.data(), count, dt, op);
    for (size_t i = 0; i < count; ++i)
      ASSERT_TRUE(elemOk(dt, op, a.data(), b.data(), want.data(), i)) << "portable vs reference at " << i;

    // (dst, a, b) byte offsets: aligned, one element off, one byte off, and mixed.
    const size_t offsets[][3] = {{0, 0, 0}, {es, es, es}, {1, 1, 1}, {1, 0, es}, {3, es, 1}};
    for (const char* isa : isas) {
      ASSERT_TRUE(forceIsa(isa));
      for (int alias = 0; alias < 3; ++alias) {  // 0: dst separate, 1: dst == a, 2: dst == b
        for (size_t k = 0; k < std::size(offsets); ++k) {
          if (count > 100000 && k != size_t(alias)) continue;  // keep the big count to one layout per alias
          SCOPED_TRACE(std::string(isa) + " alias=" + std::to_string(alias) + " layout=" + std::to_string(k));
          ga.load(a, offsets[k][1]);
          gb.load(b, offsets[k][2]);
          gd.load(nullptr, alias == 0 ? count * es : 0, offsets[k][0]);
          unsigned char* dst = alias == 1 ? ga.p() : alias == 2 ? gb.p() : gd.p();
          reduce(dst, ga.p(), gb.p(), count, dt, op);
          EXPECT_TRUE(count == 0 || std::memcmp(dst, want.data(), count * es) == 0);
          EXPECT_TRUE(ga.guardsIntact() && gb.guardsIntact() && gd.guardsIntact());
          if (alias != 1) {
            EXPECT_TRUE(count == 0 || std::memcmp(ga.p(), a.data(), count * es) == 0);
          }
          if (alias != 2) {
            EXPECT_TRUE(count == 0 || std::memcmp(gb.p(), b.data(), count * es) == 0);
          }
          if (HasFailure()) return;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, ReduceTest, ::testing::ValuesIn(typeOpPairs()),
                         [](const auto& info) {
                           return std::string(dataTypeName(std::get<0>(info.param))) + "_" +
                                  redOpName(std::get<1>(info.param));
                         });

// Destinations of 8 MiB and more take the non-temporal store path: head peeled to a 64-byte boundary when
// dst is element-aligned, plain stores otherwise.
TEST(Reduce, LargeStreamingStores) {
  IsaGuard guard;
  const auto isas = availableIsas();
  Arena &ga = arena(0), &gb = arena(1), &gd = arena(2);
  auto &a = scratch(0), &b = scratch(1), &want = scratch(2);
  for (chorusDataType_t dt : {chorusInt8, chorusFloat32, chorusBfloat16}) {
    const size_t es = dataTypeSize(dt), count = (size_t(9) << 20) / es + 13;
    randomData(a, dt, count, 11);
    randomData(b, dt, count, 12);
    want.resize(count * es);
    ASSERT_TRUE(forceIsa("portable"));
    reduce(want.data(), a.data(), b.data(), count, dt, chorusSum);
    const size_t layouts[][2] = {{0, 0}, {0, 1}, {1, 3 * es}, {2, 8}};  // {alias, offset}
    for (const char* isa : isas) {
      ASSERT_TRUE(forceIsa(isa));
      for (const auto& l : layouts) {
        SCOPED_TRACE(std::string(isa) + " " + dataTypeName(dt) + " alias=" + std::to_string(l[0]) +
                     " off=" + std::to_string(l[1]));
        ga.load(a, l[0] == 1 ? l[1] : 0);
        gb.load(b, l[0] == 2 ? l[1] : 0);
        gd.load(nullptr, l[0] == 0 ? count * es : 0, l[1]);
        unsigned char* dst = l[0] == 1 ? ga.p() : l[0] == 2 ? gb.p() : gd.p();
        reduce(dst, ga.p(), gb.p(), count, dt, chorusSum);
        EXPECT_EQ(std::memcmp(dst, want.data(), want.size()), 0);
        EXPECT_TRUE(ga.guardsIntact() && gb.guardsIntact() && gd.guardsIntact());
      }
    }
  }
}

// A bitwise op of a floating-point datatype does not apply (opApplies): reduce leaves dst as it was.
TEST(Reduce, BitwiseOpsOfFloatsWriteNothing) {
  IsaGuard guard;
  for (const char* isa : availableIsas()) {
    ASSERT_TRUE(forceIsa(isa));
    for (chorusDataType_t dt : {chorusFloat16, chorusFloat32, chorusFloat64, chorusBfloat16})
      for (chorusRedOp_t op : {chorusBand, chorusBor, chorusBxor}) {
        EXPECT_FALSE(opApplies(op, dt));
        double a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8}, d[4] = {-1, -1, -1, -1};
        reduce(d, a, b, 4 * 8 / dataTypeSize(dt), dt, op);
        for (double x : d) EXPECT_EQ(x, -1) << isa << " " << dataTypeName(dt) << " " << redOpName(op);
      }
  }
}

// ---- multiply (PreMulSum's first step) ----

// Against the independent reference (elemOk's chorusProd, the scalar as every b), every count, in place and
// misaligned, guards intact, the input unchanged out of place.
TEST(Multiply, AllTypesAgainstTheReferenceAnyAlignmentInPlace) {
  Arena &gs = arena(0), &gd = arena(2);
  auto &in = scratch(0), &scalars = scratch(1);
  for (chorusDataType_t dt : kTypes) {
    const size_t es = dataTypeSize(dt);
    for (size_t count : {0, 1, 15, 33, 1000, 100003}) {
      SCOPED_TRACE(std::string(dataTypeName(dt)) + " count=" + std::to_string(count));
      randomData(in, dt, count, count * 3 + unsigned(dt));
      randomData(scalars, dt, 1, count + 17);
      const std::vector<unsigned char> scalar(scalars.begin(), scalars.end());
      scalars.resize(count * es);
      for (size_t i = 1; i < count; ++i) std::memcpy(scalars.data() + i * es, scalar.data(), es);
      for (size_t off : {size_t(0), size_t(1), es}) {
        for (bool inPlace : {false, true}) {
          gs.load(in, off);
          unsigned char* dst = inPlace ? gs.p() : gd.load(nullptr, count * es, off + 1);
          multiply(dst, gs.p(), count, dt, scalar.data());
          for (size_t i = 0; i < count; ++i)
            ASSERT_TRUE(elemOk(dt, chorusProd, in.data(), scalars.data(), dst, i)) << "at " << i << " off=" << off;
          if (!inPlace) {
            EXPECT_TRUE(count == 0 || std::memcmp(gs.p(), in.data(), count * es) == 0);
          }
          EXPECT_TRUE(gs.guardsIntact() && gd.guardsIntact());
        }
      }
    }
  }
}

// ---- scaleDivide ----

template <class T>
bool intDivOk(const unsigned char* in, const unsigned char* out, size_t i, int d) {
  const T x = get<T>(in, i);
  T want;
  using U = std::make_unsigned_t<T>;
  if constexpr (std::is_signed_v<T>) want = d == -1 ? T(U(0) - U(x)) : T(x / d);  // -1: wraps, no overflow
  else want = d > 0 ? T(uint64_t(x) / uint64_t(d)) : T(x / T(d));  // a rank count is never cut to the type
  return get<T>(out, i) == want;
}

bool divOk(chorusDataType_t dt, const unsigned char* in, const unsigned char* out, size_t i, int d) {
  switch (dt) {
    case chorusInt8: return intDivOk<int8_t>(in, out, i, d);
    case chorusUint8: return intDivOk<uint8_t>(in, out, i, d);
    case chorusInt32: return intDivOk<int32_t>(in, out, i, d);
    case chorusUint32: return intDivOk<uint32_t>(in, out, i, d);
    case chorusInt64: return intDivOk<int64_t>(in, out, i, d);
    case chorusUint64: return intDivOk<uint64_t>(in, out, i, d);
    case chorusFloat16: return withinUlp(get<uint16_t>(out, i), halfToDouble(get<uint16_t>(in, i)) / d, kHalf, 10, -14);
    case chorusBfloat16:
      return withinUlp(get<uint16_t>(out, i), bf16ToDouble(get<uint16_t>(in, i)) / d, kBf16, 7, -126);
    case chorusFloat32: return get<float>(out, i) == get<float>(in, i) / float(d);
    case chorusFloat64: return get<double>(out, i) == get<double>(in, i) / double(d);
  }
  return false;
}

TEST(ScaleDivide, AllTypesIsasAlignments) {
  IsaGuard guard;
  const auto isas = availableIsas();
  Arena& g = arena(3);
  auto &in = scratch(0), &want = scratch(1);
  for (chorusDataType_t dt : kTypes) {
    const size_t es = dataTypeSize(dt);
    for (int d : {1, 2, 3, 7, -1, -3, 256, 300, 1000}) {
      for (size_t count : {0, 1, 15, 33, 65, 1000, 100003}) {
        SCOPED_TRACE(std::string(dataTypeName(dt)) + " d=" + std::to_string(d) + " count=" + std::to_string(count));
        randomData(in, dt, count, count + unsigned(dt) * 1000 + unsigned(d + 10));
        want = in;
        ASSERT_TRUE(forceIsa("portable"));
        scaleDivide(want.data(), count, dt, d);
        for (size_t i = 0; i < count; ++i) ASSERT_TRUE(divOk(dt, in.data(), want.data(), i, d)) << "at " << i;
        for (const char* isa : isas) {
          ASSERT_TRUE(forceIsa(isa));
          for (size_t off : {size_t(0), size_t(1), es}) {
            g.load(in, off);
            scaleDivide(g.p(), count, dt, d);
            EXPECT_TRUE(count == 0 || std::memcmp(g.p(), want.data(), count * es) == 0) << isa << " off=" << off;
            EXPECT_TRUE(g.guardsIntact()) << isa;
          }
        }
      }
    }
    randomData(in, dt, 5, 1);
    g.load(in, 0);  // divisor 0 is a no-op
    const std::vector<unsigned char> before(g.mem);
    scaleDivide(g.p(), 5, dt, 0);
    EXPECT_EQ(g.mem, before);
  }
}

// ---- special values: exhaustive 16-bit patterns ----

// Every 16-bit pattern (NaN, inf, subnormals) on every path: max(x, x) round-trips it exactly (a NaN stays a
// NaN), and sums and products with random patterns are rounded to nearest even.
TEST(Special, Float16AllPatterns) {
  IsaGuard guard;
  Rng rng{7};
  for (chorusDataType_t dt : {chorusFloat16, chorusBfloat16}) {
    const Fmt16& f = dt == chorusFloat16 ? kHalf : kBf16;
    std::vector<uint16_t> a(65536), b(65536), out(65536);
    for (size_t i = 0; i < a.size(); ++i) a[i] = uint16_t(i), b[i] = uint16_t(rng());
    for (const char* isa : availableIsas()) {
      SCOPED_TRACE(std::string(isa) + " " + dataTypeName(dt));
      ASSERT_TRUE(forceIsa(isa));
      reduce(out.data(), a.data(), a.data(), a.size(), dt, chorusMax);
      for (size_t i = 0; i < a.size(); ++i)
        ASSERT_TRUE(out[i] == a[i] || (std::isnan(f.dec(a[i])) && std::isnan(f.dec(out[i])))) << a[i];
      for (chorusRedOp_t op : {chorusSum, chorusProd}) {
        reduce(out.data(), a.data(), b.data(), a.size(), dt, op);
        for (size_t i = 0; i < a.size(); ++i) {
          const double x = f.dec(a[i]), y = f.dec(b[i]);
          ASSERT_TRUE(isNearest(out[i], op == chorusSum ? x + y : x * y, f))
              << a[i] << " " << redOpName(op) << " " << b[i] << " -> " << out[i];
        }
      }
    }
  }
}

TEST(Names, TypesOpsAndIsa) {
  EXPECT_EQ(dataTypeSize(chorusBfloat16), 2u);
  EXPECT_EQ(dataTypeSize(chorusFloat64), 8u);
  EXPECT_EQ(dataTypeSize(chorusDataType_t(12)), 0u);  // (values inside the enum's range: no UB)
  EXPECT_FALSE(dataTypeValid(chorusDataType_t(15)));
  EXPECT_TRUE(redOpValid(chorusBxor));
  EXPECT_FALSE(redOpValid(chorusNumOps));
  EXPECT_FALSE(opApplies(chorusBand, chorusFloat32));
  EXPECT_TRUE(opApplies(chorusBand, chorusUint8));
  EXPECT_STREQ(redOpName(chorusBand), "band");
  EXPECT_STREQ(redOpName(chorusBxor), "bxor");
  EXPECT_STREQ(redOpName(chorusNumOps), "unknown");
  EXPECT_STREQ(dataTypeName(chorusUint32), "uint32");
  EXPECT_STREQ(dataTypeName(chorusFloat16), "float16");
  EXPECT_STREQ(redOpName(chorusAvg), "avg");
  EXPECT_FALSE(forceIsa("sse9"));
  EXPECT_FALSE(forceIsa(nullptr));
  IsaGuard guard;
  const auto isas = availableIsas();
  EXPECT_STREQ(activeIsa(), isas.back());  // detection picks the widest available
  ASSERT_TRUE(forceIsa("portable"));
  EXPECT_STREQ(activeIsa(), "portable");
}

}  // namespace
