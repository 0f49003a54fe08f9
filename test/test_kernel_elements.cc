// lib/kernels/element.h (the arithmetic the CUDA kernels share) against the CPU kernels bit for bit: every datatype
// and op on every ISA path, over random bit patterns (NaNs included), special values (signed zeros, infinities,
// NaNs quiet and signalling, subnormals, extremes), exact float16/bfloat16/float32/float64 rounding ties and
// integer wrap-around; Avg's divide over several divisors. A NaN result must be a NaN; its payload is not compared
// (see expectBits).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "lib/kernels/element.h"
#include "lib/kernels/reduce.h"
#include "test/isas.h"

using namespace chorus::kernels;
using chorus::test::availableIsas;
using chorus::test::IsaGuard;
using chorus::test::kOps;
using chorus::test::kTypes;

namespace {

const int kDivisors[] = {1, 2, 3, 7, 8, -1, -3, 1000};

// splitmix64
struct Rng {
  uint64_t s;
  uint64_t operator()() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
};

template <chorusDataType_t D>
constexpr bool kFloat = std::is_floating_point_v<typename elem::Elem<D>::C>;

// Mantissa bits of the stored format (0 for integers).
template <chorusDataType_t D>
constexpr int kMant = D == chorusFloat16 ? 10 : D == chorusBfloat16 ? 7 : D == chorusFloat32 ? 23
                      : D == chorusFloat64 ? 52 : 0;

// Bit patterns (the low bytes count) of values every datatype's arithmetic must get right.
template <chorusDataType_t D>
std::vector<uint64_t> specials() {
  if constexpr (D == chorusFloat16)  // ... 2^-11 (half an ulp of 1), 16 (65504 + 16 ties to infinity), 0.5
    return {0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0xfe00, 0x7e01, 0xffff, 0x7c01, 0xfd55, 0x0001, 0x8001,
            0x0003, 0x03ff, 0x0400, 0x7bff, 0xfbff, 0x3c00, 0xbc00, 0x3c01, 0x3800, 0x1000, 0x4c00, 0x6800};
  else if constexpr (D == chorusBfloat16)  // ... 2^-8 (half an ulp of 1), 2^119 (max + 2^119 ties to infinity)
    return {0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0xffc0, 0x7fc1, 0xffff, 0x7f81, 0xffa5, 0x0001, 0x8001,
            0x0003, 0x007f, 0x0080, 0x7f7f, 0xff7f, 0x3f80, 0xbf80, 0x3f81, 0x3f00, 0x3b80, 0x7b00, 0x4000};
  else if constexpr (D == chorusFloat32)  // ... 2^-24, 2^103 (half an ulp of 1 and of the maximum), 3, 1/3
    return {0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00000, 0x7fc12345, 0xffffffff,
            0x7f800001, 0xffa00005, 0x00000001, 0x80000001, 0x007fffff, 0x00800000, 0x7f7fffff, 0xff7fffff,
            0x3f800000, 0xbf800000, 0x3f800001, 0x3f000000, 0x33800000, 0x73000000, 0x40400000, 0x3eaaaaab};
  else if constexpr (D == chorusFloat64)  // the same values
    return {0x0ull, 0x8000000000000000ull, 0x7ff0000000000000ull, 0xfff0000000000000ull, 0x7ff8000000000000ull,
            0xfff8000000000000ull, 0x7ff8000012345678ull, 0xffffffffffffffffull, 0x7ff0000000000001ull,
            0xfff4000000000005ull, 0x1ull, 0x8000000000000001ull, 0x000fffffffffffffull, 0x0010000000000000ull,
            0x7fefffffffffffffull, 0xffefffffffffffffull, 0x3ff0000000000000ull, 0xbff0000000000000ull,
            0x3ff0000000000001ull, 0x3fe0000000000000ull, 0x3ca0000000000000ull, 0x7c90000000000000ull,
            0x4008000000000000ull, 0x3fd5555555555555ull};
  else {  // integers: 0, +-1, +-2, 3, -7, 100, the extremes and their neighbours, alternating bits
    using U = std::make_unsigned_t<elem::Storage<D>>;
    const U mn = U(U(1) << (8 * sizeof(U) - 1)), mx = U(mn - 1);
    return {0, 1, U(-1), 2, U(-2), 3, U(-7), 100, mn, mx, U(mn + 1), U(mx - 1), U(0x5555555555555555ull),
            U(0xaaaaaaaaaaaaaaaaull)};
  }
}

template <chorusDataType_t D>
elem::Storage<D> fromBits(uint64_t bits) {
  elem::Storage<D> s;
  std::memcpy(&s, &bits, sizeof s);  // little-endian: the low bytes
  return s;
}
template <class S>
uint64_t toBits(S s) {
  uint64_t bits = 0;
  std::memcpy(&bits, &s, sizeof s);
  return bits;
}

template <chorusDataType_t D>
struct Inputs {
  std::vector<elem::Storage<D>> a, b;
  void add(uint64_t x, uint64_t y) { a.push_back(fromBits<D>(x)), b.push_back(fromBits<D>(y)); }
};

// Random pairs first, as many as put the special values in every ISA's vector tail (count * size % 256 is
// 128 + 9 * size: whole vectors and a partial one after the last 4-vector block, for 16/32/64-byte vectors); then
// exact rounding ties (a + half an ulp of a), random values against specials, and all specials against all.
template <chorusDataType_t D>
Inputs<D> makeInputs(uint64_t seed) {
  using S = elem::Storage<D>;
  Rng rng{seed};
  const auto sp = specials<D>();
  Inputs<D> in;
  const size_t tail = 400 + 2 * 8 * sp.size() + sp.size() * sp.size();
  for (size_t i = 0; i < 2000 || ((i + tail) * sizeof(S)) % 256 != 128 + 9 * sizeof(S); ++i) in.add(rng(), rng());
  for (int i = 0; i < 400; ++i) {
    uint64_t x = rng(), y = rng();
    if constexpr (kFloat<D>) {  // y = 2^(e - mant - 1) for a's exponent e: x + y is exactly halfway
      constexpr int m = kMant<D>, ebits = 8 * int(sizeof(S)) - 1 - m;
      constexpr uint64_t emax = (uint64_t(1) << ebits) - 1;
      const uint64_t e = uint64_t(m) + 2 + rng() % (emax - uint64_t(m) - 2);
      const uint64_t sign = uint64_t(i & 1) << (8 * sizeof(S) - 1);
      x = sign | (e << m) | (x & ((uint64_t(1) << m) - 1));
      y = sign | ((e - uint64_t(m) - 1) << m);
    }
    in.add(x, y);
  }
  for (uint64_t s : sp)
    for (int k = 0; k < 8; ++k) in.add(s, rng()), in.add(rng(), s);
  for (uint64_t x : sp)
    for (uint64_t y : sp) in.add(x, y);
  return in;
}

template <chorusDataType_t D>
elem::Storage<D> applyOp(chorusRedOp_t op, elem::Storage<D> a, elem::Storage<D> b) {
  switch (op) {
    case chorusProd: return elem::apply<D, chorusProd>(a, b);
    case chorusMax: return elem::apply<D, chorusMax>(a, b);
    case chorusMin: return elem::apply<D, chorusMin>(a, b);
    case chorusAvg: return elem::apply<D, chorusAvg>(a, b);
    case chorusBand: case chorusBor: case chorusBxor:
      if constexpr (elem::kInteger<D>) {
        if (op == chorusBand) return elem::apply<D, chorusBand>(a, b);
        if (op == chorusBor) return elem::apply<D, chorusBor>(a, b);
        return elem::apply<D, chorusBxor>(a, b);
      }
      ADD_FAILURE() << "a bitwise op of " << dataTypeName(D);
      return a;
    default: return elem::apply<D, chorusSum>(a, b);
  }
}

// The two cases where the portable float16/bfloat16 kernels differ from the SIMD ones (and element.h, which
// follows the SIMD ones): both operands NaN (portable: a's payload, quieted) and a signalling bfloat16 NaN that
// max/min selects (portable: quieted).
template <chorusDataType_t D>
std::optional<elem::Storage<D>> portableAlternative(chorusRedOp_t op, uint16_t a, uint16_t b, uint16_t want) {
  if constexpr (D == chorusFloat16 || D == chorusBfloat16) {
    const uint16_t exp = D == chorusFloat16 ? 0x7c00 : 0x7f80, quiet = D == chorusFloat16 ? 0x200 : 0x40;
    auto nan = [&](uint16_t h) { return (h & exp) == exp && (h & ~(exp | 0x8000)) != 0; };
    const bool minmax = op == chorusMax || op == chorusMin;
    if (!minmax && nan(a) && nan(b)) return uint16_t(a | quiet);
    if (D == chorusBfloat16 && minmax && nan(want) && !(want & quiet)) return uint16_t(want | quiet);
  }
  return std::nullopt;
}

// Element-wise comparison of got against want (per element), at most a few failures reported. Two NaNs are equal
// whatever their payloads: x86 returns the payload of one operand, the first of the instruction, and which one
// that is is the compiler's choice (an -O0 build of the CPU kernels picks others than -O2 does).
template <chorusDataType_t D, class S, class Want>
void expectBits(const std::vector<S>& got, Want&& want, const std::string& what) {
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 8; ++i) {
    const S w = want(i);
    if (std::memcmp(&got[i], &w, sizeof(S)) == 0) continue;
    if constexpr (std::is_floating_point_v<decltype(elem::Elem<D>::load(w))>) {
      const auto g = elem::Elem<D>::load(got[i]), x = elem::Elem<D>::load(w);
      if (g != g && x != x) continue;
    }
    ++bad;
    ADD_FAILURE() << what << " at " << i << ": CPU 0x" << std::hex << toBits(got[i]) << ", element.h 0x" << toBits(w);
  }
}

class ElementTest : public ::testing::TestWithParam<chorusDataType_t> {};

TEST_P(ElementTest, ReduceAndAvgMatchEveryIsa) {
  IsaGuard guard;
  elem::withType(GetParam(), [](auto tag) {
    constexpr chorusDataType_t D = decltype(tag)::value;
    using S = elem::Storage<D>;
    const Inputs<D> in = makeInputs<D>(uint64_t(D) * 1000 + 1);
    const size_t n = in.a.size();
    std::vector<S> out(n), scaled(n);
    for (const char* isa : availableIsas()) {
      ASSERT_TRUE(forceIsa(isa));
      const bool portable = std::strcmp(isa, "portable") == 0;
      for (chorusRedOp_t op : kOps) {
        if (!opApplies(op, D)) continue;
        const std::string what = std::string(isa) + " " + dataTypeName(D) + " " + redOpName(op);
        reduce(out.data(), in.a.data(), in.b.data(), n, D, op);
        expectBits<D>(out, [&](size_t i) {
          const S w = applyOp<D>(op, in.a[i], in.b[i]);
          if constexpr (sizeof(S) == 2) {
            if (portable)
              if (const auto alt = portableAlternative<D>(op, in.a[i], in.b[i], w)) return *alt;
          }
          return w;
        }, what);
        if (op != chorusAvg) continue;
        for (int d : kDivisors) {  // Avg's final step, on the sums just checked
          scaled = out;
          scaleDivide(scaled.data(), n, D, d);
          expectBits<D>(scaled, [&](size_t i) { return elem::scale<D>(out[i], d); }, what + " / " + std::to_string(d));
        }
      }
    }
  });
}

// scaleDivide straight on the inputs (specials, NaNs and all), and divisor 0 (a no-op).
TEST_P(ElementTest, ScaleDivideMatchesEveryIsa) {
  IsaGuard guard;
  elem::withType(GetParam(), [](auto tag) {
    constexpr chorusDataType_t D = decltype(tag)::value;
    using S = elem::Storage<D>;
    const Inputs<D> in = makeInputs<D>(uint64_t(D) * 1000 + 2);
    std::vector<S> out;
    for (const char* isa : availableIsas()) {
      ASSERT_TRUE(forceIsa(isa));
      for (int d : {1, 2, 3, 7, 8, -1, -3, 256, 300, 1000, 0}) {
        out = in.a;
        scaleDivide(out.data(), out.size(), D, d);
        expectBits<D>(out, [&](size_t i) { return elem::scale<D>(in.a[i], d); },
                   std::string(isa) + " " + dataTypeName(D) + " / " + std::to_string(d));
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Kernels, ElementTest, ::testing::ValuesIn(kTypes),
                         [](const auto& info) { return std::string(dataTypeName(info.param)); });

// Destinations of 8 MiB and more take the SIMD kernels' non-temporal path (its own instantiation of the loop):
// the special pairs tiled over 9 MiB.
TEST(Element, LargeStreamingPath) {
  IsaGuard guard;
  for (chorusDataType_t dt : {chorusFloat16, chorusFloat32, chorusFloat64, chorusBfloat16, chorusInt64}) {
    elem::withType(dt, [](auto tag) {
      constexpr chorusDataType_t D = decltype(tag)::value;
      using S = elem::Storage<D>;
      const Inputs<D> in = makeInputs<D>(uint64_t(D) * 1000 + 3);
      const size_t n = (size_t(9) << 20) / sizeof(S) + 5;
      std::vector<S> a(n), b(n), out(n);
      for (size_t i = 0; i < n; ++i) a[i] = in.a[i % in.a.size()], b[i] = in.b[i % in.b.size()];
      for (const char* isa : availableIsas()) {
        if (std::strcmp(isa, "portable") == 0) continue;  // no streaming path; covered above
        ASSERT_TRUE(forceIsa(isa));
        for (chorusRedOp_t op : {chorusSum, chorusProd, chorusMax, chorusMin}) {
          reduce(out.data(), a.data(), b.data(), n, D, op);
          expectBits<D>(out, [&](size_t i) { return applyOp<D>(op, a[i], b[i]); },
                     std::string(isa) + " " + dataTypeName(D) + " " + redOpName(op) + " 9 MiB");
        }
      }
    });
  }
}

// PreMulSum's multiply rounds as chorusProd: kernels::multiply against reduce(..., chorusProd) with the scalar as
// every b, on every ISA, over the special values as scalars (NaNs, infinities, signed zeros, subnormals).
TEST_P(ElementTest, MultiplyRoundsAsProdOnEveryIsa) {
  IsaGuard guard;
  elem::withType(GetParam(), [](auto tag) {
    constexpr chorusDataType_t D = decltype(tag)::value;
    using S = elem::Storage<D>;
    const Inputs<D> in = makeInputs<D>(uint64_t(D) * 1000 + 4);
    const size_t n = in.a.size();
    std::vector<S> got(n), want(n), scalars(n);
    for (const char* isa : availableIsas()) {
      ASSERT_TRUE(forceIsa(isa));
      for (uint64_t bits : specials<D>()) {
        const S k = fromBits<D>(bits);
        std::fill(scalars.begin(), scalars.end(), k);
        multiply(got.data(), in.a.data(), n, D, &k);
        reduce(want.data(), in.a.data(), scalars.data(), n, D, chorusProd);
        expectBits<D>(got, [&](size_t i) { return want[i]; },
                      std::string(isa) + " " + dataTypeName(D) + " times the bits " + std::to_string(bits));
        got = in.a;
        multiply(got.data(), got.data(), n, D, &k);  // in place
        expectBits<D>(got, [&](size_t i) { return want[i]; }, std::string(isa) + " " + dataTypeName(D) + " in place");
      }
    }
  });
}

// The semantics element.h pins down, spelled out on a few values.
TEST(Element, DocumentedCases) {
  namespace e = elem;
  // float16 ties: 1 + 2^-11 rounds to even (1), 1.0009765625 + 2^-11 rounds up; 65504 + 16 becomes infinity.
  EXPECT_EQ((e::apply<chorusFloat16, chorusSum>(0x3c00, 0x1000)), 0x3c00);
  EXPECT_EQ((e::apply<chorusFloat16, chorusSum>(0x3c01, 0x1000)), 0x3c02);
  EXPECT_EQ((e::apply<chorusFloat16, chorusSum>(0x7bff, 0x4c00)), 0x7c00);
  // float16 NaNs come back quiet with their payload; two NaNs give b's; inf - inf the default NaN.
  EXPECT_EQ((e::apply<chorusFloat16, chorusMax>(0x3c00, 0x7c01)), 0x7e01);
  EXPECT_EQ((e::apply<chorusFloat16, chorusSum>(0x7e01, 0xfe02)), 0xfe02);
  EXPECT_EQ((e::apply<chorusFloat16, chorusSum>(0x7c00, 0xfc00)), 0xfe00);
  // bfloat16: ties to even; max/min pass a signalling NaN through; inf - inf the default NaN.
  EXPECT_EQ((e::apply<chorusBfloat16, chorusSum>(0x3f80, 0x3b80)), 0x3f80);
  EXPECT_EQ((e::apply<chorusBfloat16, chorusSum>(0x3f81, 0x3b80)), 0x3f82);
  EXPECT_EQ((e::apply<chorusBfloat16, chorusMax>(0x3f80, 0x7f81)), 0x7f81);
  EXPECT_EQ((e::apply<chorusBfloat16, chorusSum>(0x7f80, 0xff80)), 0xffc0);
  // max/min: b when either is NaN or for +0 against -0.
  EXPECT_EQ(toBits(e::apply<chorusFloat32, chorusMax>(e::bitCast<float>(0x7fc00001u), 1.0f)), 0x3f800000u);
  EXPECT_EQ(toBits(e::apply<chorusFloat32, chorusMin>(0.0f, -0.0f)), 0x80000000u);
  // Integers wrap; signed division truncates toward zero; -1 wraps the minimum; unsigned divides in 64 bits.
  EXPECT_EQ((e::apply<chorusInt8, chorusSum>(127, 1)), -128);
  EXPECT_EQ((e::apply<chorusInt32, chorusProd>(0x10000, 0x10000)), 0);
  // Bitwise ops on the two's complement bits.
  EXPECT_EQ((e::apply<chorusInt8, chorusBand>(-1, 0x5a)), 0x5a);
  EXPECT_EQ((e::apply<chorusUint64, chorusBor>(0x8000000000000000ull, 1)), 0x8000000000000001ull);
  EXPECT_EQ((e::apply<chorusInt32, chorusBxor>(-1, 0x0f0f0f0f)), -0x0f0f0f10);
  EXPECT_EQ(e::scale<chorusInt32>(-7, 2), -3);
  EXPECT_EQ(e::scale<chorusInt64>(INT64_MIN, -1), INT64_MIN);
  EXPECT_EQ(e::scale<chorusUint32>(7, -1), 0u);  // 7 / 0xffffffff
  EXPECT_EQ(e::scale<chorusUint8>(200, 300), 0);  // 300 ranks: not 200 / (300 mod 256)
  EXPECT_EQ(e::scale<chorusUint8>(255, 256), 0);  // 256 ranks: not a division by zero
  // float16 Avg divides in float32 and rounds once more: 2^-24 / 2 ties to 0, 3 * 2^-24 / 2 to 2 * 2^-24.
  EXPECT_EQ(e::scale<chorusFloat16>(0x0001, 2), 0x0000);
  EXPECT_EQ(e::scale<chorusFloat16>(0x0003, 2), 0x0002);
}

}  // namespace
