// Internal: ISA-neutral streaming loops, included by each ISA file. Everything here has internal linkage so
// that an instantiation compiled with AVX-512 flags can never be picked by the linker for another TU.
#pragma once

#include <cstddef>

namespace chorus::kernels::detail {
namespace {

// A Codec loads kBytes of memory (kBytes / kElem elements) into a compute register V and stores it back;
// an Op combines two registers. Pointers may have any alignment and dst may equal a or b exactly.
template <class Codec, class Op>
void binaryLoop(void* dst, const void* a, const void* b, size_t n) {
  constexpr size_t kB = Codec::kBytes;
  auto* d = static_cast<unsigned char*>(dst);
  const auto* x = static_cast<const unsigned char*>(a);
  const auto* y = static_cast<const unsigned char*>(b);
  const size_t bytes = n * Codec::kElem;
  size_t i = 0;
  // Four independent vectors per trip keep enough loads in flight to saturate memory bandwidth.
  for (; i + 4 * kB <= bytes; i += 4 * kB) {
    auto r0 = Op::f(Codec::load(x + i), Codec::load(y + i));
    auto r1 = Op::f(Codec::load(x + i + kB), Codec::load(y + i + kB));
    auto r2 = Op::f(Codec::load(x + i + 2 * kB), Codec::load(y + i + 2 * kB));
    auto r3 = Op::f(Codec::load(x + i + 3 * kB), Codec::load(y + i + 3 * kB));
    Codec::store(d + i, r0);
    Codec::store(d + i + kB, r1);
    Codec::store(d + i + 2 * kB, r2);
    Codec::store(d + i + 3 * kB, r3);
  }
  for (; i + kB <= bytes; i += kB) Codec::store(d + i, Op::f(Codec::load(x + i), Codec::load(y + i)));
  if (i < bytes) {
    // Tail: run the same vector code on zero-padded copies so the result is bit-identical to the body.
    alignas(64) unsigned char ta[kB] = {}, tb[kB] = {}, td[kB];
    const size_t rem = bytes - i;
    __builtin_memcpy(ta, x + i, rem);
    __builtin_memcpy(tb, y + i, rem);
    Codec::store(td, Op::f(Codec::load(ta), Codec::load(tb)));
    __builtin_memcpy(d + i, td, rem);
  }
}

// buf[i] = buf[i] / divisor, with dv the divisor already splatted into a compute register.
template <class Codec, class Div, class V>
void scaleLoop(void* buf, size_t n, V dv) {
  constexpr size_t kB = Codec::kBytes;
  auto* p = static_cast<unsigned char*>(buf);
  const size_t bytes = n * Codec::kElem;
  size_t i = 0;
  for (; i + kB <= bytes; i += kB) Codec::store(p + i, Div::f(Codec::load(p + i), dv));
  if (i < bytes) {
    alignas(64) unsigned char t[kB] = {};
    const size_t rem = bytes - i;
    __builtin_memcpy(t, p + i, rem);
    Codec::store(t, Div::f(Codec::load(t), dv));
    __builtin_memcpy(p + i, t, rem);
  }
}

}  // namespace
}  // namespace chorus::kernels::detail
