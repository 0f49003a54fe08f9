// Internal: ISA-neutral streaming loops, included by each ISA file. Everything here has internal linkage so
// that an instantiation compiled with AVX-512 flags can never be picked by the linker for another TU.
#pragma once

#include <xmmintrin.h>  // _mm_sfence (SSE, baseline x86-64)

#include <cstddef>
#include <cstdint>

namespace chorus::kernels::detail {
namespace {

// Destinations at least this large cannot stay in cache anyway: non-temporal stores skip the read-for-ownership
// of each destination line, a quarter less memory traffic (about 1.4x faster at 64 MiB on an EPYC).
constexpr size_t kStreamMinBytes = size_t(8) << 20;

// A compute value is a register or a struct {lo, hi} of two (bfloat16 splits even and odd elements).
template <class Op, class V>
V apply(V a, V b) {
  if constexpr (requires { a.lo; }) return {Op::f(a.lo, b.lo), Op::f(a.hi, b.hi)};
  else return Op::f(a, b);
}
template <class Op, class V, class R>
V apply1(V a, R d) {
  if constexpr (requires { a.lo; }) return {Op::f(a.lo, d), Op::f(a.hi, d)};
  else return Op::f(a, d);
}

// A Codec loads kBytes of memory (kBytes / kElem elements) into a compute value V, stores it back (store:
// any alignment; stream: non-temporal, kBytes-aligned); an Op combines two registers.
// Whole blocks of four vectors, then single vectors; returns the bytes done.
template <class Codec, class Op, bool kStream>
size_t blocks(unsigned char* d, const unsigned char* x, const unsigned char* y, size_t bytes) {
  constexpr size_t kB = Codec::kBytes;
  auto put = [d](size_t at, auto v) {
    if constexpr (kStream) Codec::stream(d + at, v);
    else Codec::store(d + at, v);
  };
  size_t i = 0;
  // Four independent vectors per trip keep enough loads in flight to saturate memory bandwidth. All loads
  // of a trip precede its stores, which is what makes exact aliasing (d == x or d == y) safe.
  for (; i + 4 * kB <= bytes; i += 4 * kB) {
    auto r0 = apply<Op>(Codec::load(x + i), Codec::load(y + i));
    auto r1 = apply<Op>(Codec::load(x + i + kB), Codec::load(y + i + kB));
    auto r2 = apply<Op>(Codec::load(x + i + 2 * kB), Codec::load(y + i + 2 * kB));
    auto r3 = apply<Op>(Codec::load(x + i + 3 * kB), Codec::load(y + i + 3 * kB));
    put(i, r0);
    put(i + kB, r1);
    put(i + 2 * kB, r2);
    put(i + 3 * kB, r3);
  }
  for (; i + kB <= bytes; i += kB) put(i, apply<Op>(Codec::load(x + i), Codec::load(y + i)));
  return i;
}

// Copies n < kMax <= 64 bytes with two overlapping moves of a fixed size: a variable-length memcpy is a libc
// call, and the three of a tail were a third of the cost of reducing 8 bytes.
template <size_t kMax>
void copyShort(unsigned char* d, const unsigned char* s, size_t n) {
  static_assert(kMax <= 64);
  if constexpr (kMax > 32) {
    if (n >= 32) {
      __builtin_memcpy(d, s, 32);
      __builtin_memcpy(d + n - 32, s + n - 32, 32);
      return;
    }
  }
  if constexpr (kMax > 16) {
    if (n >= 16) {
      __builtin_memcpy(d, s, 16);
      __builtin_memcpy(d + n - 16, s + n - 16, 16);
      return;
    }
  }
  if (n >= 8) {
    __builtin_memcpy(d, s, 8);
    __builtin_memcpy(d + n - 8, s + n - 8, 8);
  } else if (n >= 4) {
    __builtin_memcpy(d, s, 4);
    __builtin_memcpy(d + n - 4, s + n - 4, 4);
  } else if (n > 0) {
    d[0] = s[0];
    d[n - 1] = s[n - 1];
    if (n == 3) d[1] = s[1];
  }
}

// Regular stores, any length: the tail runs the same vector code on zero-padded copies, so its results are
// bit-identical to the body's.
template <class Codec, class Op>
void span(unsigned char* d, const unsigned char* x, const unsigned char* y, size_t bytes) {
  constexpr size_t kB = Codec::kBytes;
  const size_t i = blocks<Codec, Op, false>(d, x, y, bytes);
  if (i < bytes) {
    alignas(64) unsigned char ta[kB] = {}, tb[kB] = {}, td[kB];
    const size_t rem = bytes - i;
    copyShort<kB>(ta, x + i, rem);
    copyShort<kB>(tb, y + i, rem);
    Codec::store(td, apply<Op>(Codec::load(ta), Codec::load(tb)));
    copyShort<kB>(d + i, td, rem);
  }
}

template <class Codec, class Op>
void binaryLoop(void* dst, const void* a, const void* b, size_t n) {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* x = static_cast<const unsigned char*>(a);
  const auto* y = static_cast<const unsigned char*>(b);
  const size_t bytes = n * Codec::kElem;
  const uintptr_t addr = reinterpret_cast<uintptr_t>(d);
  if (bytes < kStreamMinBytes || addr % Codec::kElem != 0) return span<Codec, Op>(d, x, y, bytes);
  // Stream from the first 64-byte boundary (a whole number of elements away, since addr % kElem == 0).
  const size_t head = (64 - addr % 64) % 64;
  span<Codec, Op>(d, x, y, head);
  const size_t done = head + blocks<Codec, Op, true>(d + head, x + head, y + head, bytes - head);
  _mm_sfence();  // non-temporal stores are weakly ordered: publish them before any later release store
  span<Codec, Op>(d + done, x + done, y + done, bytes - done);
}

// buf[i] = buf[i] / divisor, with dv the divisor already splatted into a register.
template <class Codec, class Div, class R>
void scaleLoop(void* buf, size_t n, R dv) {
  constexpr size_t kB = Codec::kBytes;
  auto* p = static_cast<unsigned char*>(buf);
  const size_t bytes = n * Codec::kElem;
  size_t i = 0;
  for (; i + kB <= bytes; i += kB) Codec::store(p + i, apply1<Div>(Codec::load(p + i), dv));
  if (i < bytes) {
    alignas(64) unsigned char t[kB] = {};
    const size_t rem = bytes - i;
    copyShort<kB>(t, p + i, rem);
    Codec::store(t, apply1<Div>(Codec::load(t), dv));
    copyShort<kB>(p + i, t, rem);
  }
}

}  // namespace
}  // namespace chorus::kernels::detail
