// The slow, independent reference for test_collectives.cc: datatypes and ops written out here (not taken from
// the library), float16/bfloat16 conversions, deterministic inputs per (seed, rank, index) and the expected
// result of a reduction, computed element by element in int64/uint64/double.
//
// PreMulSum: kPreMulSum stands for "an op of chorusRedOpCreatePreMulSum made by each rank with its own
// preMulScalarRaw" (a test makes it on its communicator for the call). The scalars are powers of two for the
// floating-point types ({2, 0.5, -1, 1, -2, -0.5} by rank), so with the sum's inputs (multiples of 0.25 in [-2, 2])
// every product is a multiple of 1/8 within [-4, 4] and every partial sum of <= 8 of them an integer multiple of 1/8
// of at most 256 eighths: exact in bfloat16 (8 significant bits) and wider. Integers use {3, -1, 2, 5, -7, 1} on
// full-range inputs: products and sums wrap, exactly as two's complement.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "chorus/chorus.h"

namespace chorus::test {

// ------------------------------------------------------------------------------------------------------------
// Datatypes and ops (names and sizes written out here, independent of the library).

inline const chorusDataType_t kAllTypes[] = {chorusInt8,    chorusUint8,   chorusInt32,   chorusUint32, chorusInt64,
                                      chorusUint64,  chorusFloat16, chorusFloat32, chorusFloat64, chorusBfloat16};
inline const chorusRedOp_t kAllOps[] = {chorusSum, chorusProd, chorusMax, chorusMin, chorusAvg};
inline const chorusRedOp_t kBitwiseOps[] = {chorusBand, chorusBor, chorusBxor};  // integer datatypes only
inline constexpr auto kPreMulSum = static_cast<chorusRedOp_t>(chorusNumOps);  // see the top comment

inline size_t typeSize(chorusDataType_t dt) {
  switch (dt) {
    case chorusInt8: case chorusUint8: return 1;
    case chorusFloat16: case chorusBfloat16: return 2;
    case chorusInt32: case chorusUint32: case chorusFloat32: return 4;
    case chorusInt64: case chorusUint64: case chorusFloat64: return 8;
  }
  return 0;
}

inline const char* typeName(chorusDataType_t dt) {
  switch (dt) {
    case chorusInt8: return "int8";
    case chorusUint8: return "uint8";
    case chorusInt32: return "int32";
    case chorusUint32: return "uint32";
    case chorusInt64: return "int64";
    case chorusUint64: return "uint64";
    case chorusFloat16: return "float16";
    case chorusFloat32: return "float32";
    case chorusFloat64: return "float64";
    case chorusBfloat16: return "bfloat16";
  }
  return "?";
}

inline const char* opName(chorusRedOp_t op) {
  switch (op) {
    case chorusSum: return "sum";
    case chorusProd: return "prod";
    case chorusMax: return "max";
    case chorusMin: return "min";
    case chorusAvg: return "avg";
    case chorusBand: return "band";
    case chorusBor: return "bor";
    case chorusBxor: return "bxor";
    default: return op == kPreMulSum ? "premulsum" : "?";
  }
}

inline bool isFloat(chorusDataType_t dt) {
  return dt == chorusFloat16 || dt == chorusFloat32 || dt == chorusFloat64 || dt == chorusBfloat16;
}
bool isSigned(chorusDataType_t dt) { return dt == chorusInt8 || dt == chorusInt32 || dt == chorusInt64; }

// Relative tolerance for Avg of float32 and float64, which sum and then divide once (see the top comment).
inline double avgTolerance(chorusDataType_t dt) {
  switch (dt) {
    case chorusFloat16: case chorusBfloat16: return 1e-2;
    case chorusFloat32: return 1e-6;
    default: return 1e-12;
  }
}

// ---- float16 / bfloat16 <-> float, round to nearest even ----

inline uint16_t floatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  const int e = static_cast<int>(ax >> 23);                          // biased float exponent
  const uint32_t mant = (ax & 0x7fffffu) | 0x800000u;
  if (e > 142) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 2^16 (and inf): infinity
  if (e >= 113) {                                            // a normal half (carry may round up to inf)
    uint32_t h = (static_cast<uint32_t>(e - 112) << 10) | ((ax & 0x7fffffu) >> 13);
    const uint32_t rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  if (ax == 0) return sign;
  const int shift = 126 - e;  // half subnormal: mant * 2^(e-150) / 2^-24
  if (shift > 24) return sign;
  uint32_t m = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1), halfway = 1u << (shift - 1);
  if (rem > halfway || (rem == halfway && (m & 1u))) ++m;
  return static_cast<uint16_t>(sign | m);
}

inline float halfToFloat(uint16_t h) {
  const int e = (h >> 10) & 31, m = h & 1023;
  float v;
  if (e == 31) v = m ? NAN : INFINITY;
  else if (e == 0) v = std::ldexp(static_cast<float>(m), -24);
  else v = std::ldexp(static_cast<float>(1024 + m), e - 25);
  return (h & 0x8000) ? -v : v;
}

inline uint16_t floatToBf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

inline float bf16ToFloat(uint16_t b) {
  uint32_t x = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

// ---- raw elements: the element's bytes, little-endian, zero-extended into a uint64 ----

inline uint64_t readRaw(const uint8_t* p, size_t es) {
  uint64_t v = 0;
  std::memcpy(&v, p, es);
  return v;
}
void writeRaw(uint8_t* p, size_t es, uint64_t v) { std::memcpy(p, &v, es); }

inline uint64_t truncRaw(chorusDataType_t dt, uint64_t v) {
  size_t es = typeSize(dt);
  return es == 8 ? v : v & ((uint64_t{1} << (8 * es)) - 1);
}
inline int64_t signExtend(chorusDataType_t dt, uint64_t raw) {
  const int drop = 64 - 8 * static_cast<int>(typeSize(dt));
  return static_cast<int64_t>(raw << drop) >> drop;
}

inline double rawToDouble(chorusDataType_t dt, uint64_t raw) {
  switch (dt) {
    case chorusFloat16: return halfToFloat(static_cast<uint16_t>(raw));
    case chorusBfloat16: return bf16ToFloat(static_cast<uint16_t>(raw));
    case chorusFloat32: {
      uint32_t b = static_cast<uint32_t>(raw);
      float f;
      std::memcpy(&f, &b, 4);
      return f;
    }
    case chorusFloat64: {
      double d;
      std::memcpy(&d, &raw, 8);
      return d;
    }
    default: return isSigned(dt) ? static_cast<double>(signExtend(dt, raw)) : static_cast<double>(raw);
  }
}

inline uint64_t doubleToRaw(chorusDataType_t dt, double v) {
  switch (dt) {
    case chorusFloat16: return floatToHalf(static_cast<float>(v));
    case chorusBfloat16: return floatToBf16(static_cast<float>(v));
    case chorusFloat32: {
      float f = static_cast<float>(v);
      uint32_t b;
      std::memcpy(&b, &f, 4);
      return b;
    }
    case chorusFloat64: {
      uint64_t b;
      std::memcpy(&b, &v, 8);
      return b;
    }
    default: return truncRaw(dt, static_cast<uint64_t>(static_cast<int64_t>(v)));
  }
}

inline std::string showRaw(chorusDataType_t dt, uint64_t raw) {
  char buf[96];
  if (isFloat(dt))
    std::snprintf(buf, sizeof buf, "%.9g (0x%llx)", rawToDouble(dt, raw), static_cast<unsigned long long>(raw));
  else if (isSigned(dt))
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(signExtend(dt, raw)));
  else
    std::snprintf(buf, sizeof buf, "%llu", static_cast<unsigned long long>(raw));
  return buf;
}

// The ops a matrix runs for dt: the arithmetic ones, the bitwise ones on integers, and PreMulSum.
inline std::vector<chorusRedOp_t> opsFor(chorusDataType_t dt) {
  std::vector<chorusRedOp_t> v(std::begin(kAllOps), std::end(kAllOps));
  if (!isFloat(dt)) v.insert(v.end(), std::begin(kBitwiseOps), std::end(kBitwiseOps));
  v.push_back(kPreMulSum);
  return v;
}

// Rank q's PreMulSum scalar (the top comment), raw.
inline uint64_t preMulScalarRaw(chorusDataType_t dt, int q) {
  static const double kFloat[] = {2.0, 0.5, -1.0, 1.0, -2.0, -0.5};
  static const int64_t kInt[] = {3, -1, 2, 5, -7, 1};
  const size_t i = static_cast<size_t>(q) % 6;
  return isFloat(dt) ? doubleToRaw(dt, kFloat[i]) : truncRaw(dt, static_cast<uint64_t>(kInt[i]));
}

// ------------------------------------------------------------------------------------------------------------
// Deterministic inputs from (seed, rank, index).

uint64_t mix(uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

inline constexpr int kMovement = -1;  // "op" of the inputs of a data-movement collective: any bit pattern

// The raw input element `index` of `rank`, shaped for op (see the top comment).
inline uint64_t inputRaw(chorusDataType_t dt, int op, uint64_t seed, int rank, uint64_t index) {
  const uint64_t h = mix(mix(seed ^ (static_cast<uint64_t>(rank) << 52)) ^ index);
  if (op == kMovement) return truncRaw(dt, h);
  if (!isFloat(dt)) {
    switch (op) {
      case chorusProd: {
        static const int64_t kSigned[] = {-2, -1, 1, 2, 3};
        int64_t v = isSigned(dt) ? kSigned[h % 5] : static_cast<int64_t>(1 + h % 3);
        return truncRaw(dt, static_cast<uint64_t>(v));
      }
      case chorusAvg: {
        int64_t v = isSigned(dt) ? static_cast<int64_t>(h % 31) - 15 : static_cast<int64_t>(h % 32);
        return truncRaw(dt, static_cast<uint64_t>(v));
      }
      default: return truncRaw(dt, h);  // sum, max, min: full range
    }
  }
  double v;
  switch (op) {
    case chorusProd: {
      static const double kPow[] = {-2.0, -1.0, -0.5, 0.5, 1.0, 2.0};
      v = kPow[h % 6];
      break;
    }
    case chorusMax: case chorusMin: v = (static_cast<double>(h % 129) - 64.0) * 0.25; break;
    default: v = (static_cast<double>(h % 17) - 8.0) * 0.25; break;  // sum, avg
  }
  return doubleToRaw(dt, v);
}

// ---- expected values and how to compare them ----

enum class Cmp { Bytes, Exact, Approx };  // bit-for-bit; numerically equal; within avgTolerance
struct Want {
  uint64_t raw = 0;
  double val = 0;
  Cmp cmp = Cmp::Bytes;
  double tol = 0;  // Approx: the largest |actual - val| allowed
};

// Whether got (raw) is what w says.
inline bool matches(chorusDataType_t dt, const Want& w, uint64_t got) {
  switch (w.cmp) {
    case Cmp::Bytes: return got == w.raw;
    case Cmp::Exact: return rawToDouble(dt, got) == w.val;
    case Cmp::Approx: return std::fabs(rawToDouble(dt, got) - w.val) <= w.tol;
  }
  return false;
}

// Avg of float16 and bfloat16 pre-multiplies every input by 1/n rounded to the type, the product rounded once
// (what NCCL does, and the library: Note [PreMulSum]), and then sums; the terms are modelled exactly here, and each
// of the n - 1 additions, rounded to the type in whatever order the algorithm adds, is off by at most the type's
// unit roundoff times the partial sum, itself at most the sum of the terms' magnitudes.
inline double unitRoundoff(chorusDataType_t dt) { return dt == chorusFloat16 ? 0x1p-11 : 0x1p-8; }

// Reference reduction over ranks 0..n-1 of get(q) (a raw element), computed in int64/uint64/double.
template <class Get>
inline Want referenceReduce(chorusDataType_t dt, chorusRedOp_t op, int n, Get get) {
  Want w;
  const bool preMul = op == kPreMulSum;
  if (isFloat(dt)) {
    auto term = [&](int q) {
      const double v = rawToDouble(dt, get(q));
      return preMul ? v * rawToDouble(dt, preMulScalarRaw(dt, q)) : v;
    };
    double acc = term(0);
    for (int q = 1; q < n; ++q) {
      double v = term(q);
      switch (op) {
        case chorusProd: acc *= v; break;
        case chorusMax: acc = v > acc ? v : acc; break;
        case chorusMin: acc = v < acc ? v : acc; break;
        default: acc += v; break;  // sum, avg, premulsum
      }
    }
    if (op == chorusAvg && (dt == chorusFloat16 || dt == chorusBfloat16)) {
      const double s = rawToDouble(dt, doubleToRaw(dt, static_cast<float>(1.0 / n)));
      double sum = 0, magnitude = 0;
      for (int q = 0; q < n; ++q) {
        const double t = rawToDouble(dt, doubleToRaw(dt, term(q) * s));  // exact in double, rounded once
        sum += t;
        magnitude += std::fabs(t);
      }
      acc = sum;
      w.cmp = Cmp::Approx;
      w.tol = (n - 1) * unitRoundoff(dt) * magnitude;
    } else if (op == chorusAvg) {
      acc /= n;
      w.cmp = Cmp::Approx;
      w.tol = avgTolerance(dt) * std::fabs(acc);
    } else {
      w.cmp = Cmp::Exact;
    }
    w.val = acc;
    w.raw = doubleToRaw(dt, acc);
    return w;
  }
  const bool sgn = isSigned(dt);
  auto asU = [&](uint64_t raw) { return sgn ? static_cast<uint64_t>(signExtend(dt, raw)) : raw; };
  auto term = [&](int q) { return preMul ? asU(get(q)) * asU(preMulScalarRaw(dt, q)) : asU(get(q)); };
  uint64_t acc = term(0);
  for (int q = 1; q < n; ++q) {
    uint64_t v = term(q);
    switch (op) {
      case chorusSum: case chorusAvg: acc += v; break;  // wraps mod 2^64, hence mod 2^bits
      case chorusProd: acc *= v; break;
      case chorusBand: acc &= v; break;
      case chorusBor: acc |= v; break;
      case chorusBxor: acc ^= v; break;
      case chorusMax:
        if (sgn ? static_cast<int64_t>(v) > static_cast<int64_t>(acc) : v > acc) acc = v;
        break;
      case chorusMin:
        if (sgn ? static_cast<int64_t>(v) < static_cast<int64_t>(acc) : v < acc) acc = v;
        break;
      default: acc += v; break;  // premulsum
    }
  }
  if (op == chorusAvg) {  // the inputs keep the sum in range, so no wrap happened: C division truncates
    if (sgn) acc = static_cast<uint64_t>(static_cast<int64_t>(acc) / n);
    else acc = acc / static_cast<uint64_t>(n);
  }
  w.raw = truncRaw(dt, acc);
  w.val = rawToDouble(dt, w.raw);
  w.cmp = Cmp::Bytes;
  return w;
}

// Wrong results of a run: the first few in words, and how many in all.
struct Report {
  std::vector<std::string> first;
  size_t total = 0;
  void add(std::string s) {
    if (first.size() < 6) first.push_back(std::move(s));
    ++total;
  }
  void throwIfAny() const {
    if (total == 0) return;
    std::string all;
    for (const auto& s : first) all += "\n    " + s;
    if (total > first.size()) all += "\n    ... " + std::to_string(total - first.size()) + " more";
    throw std::runtime_error(std::to_string(total) + " wrong result(s):" + all);
  }
};

}  // namespace chorus::test
