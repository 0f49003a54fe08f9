// lib/kernels/copy.h against a byte loop: every length from 0 to a few KiB around the rep-movsb threshold and some
// large ones, at every source and destination offset within a cache line; the bytes around the destination stay
// untouched. (Under a sanitizer the kernel is memcpy; the optimized builds run the rep movsb path.)
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "lib/kernels/copy.h"

namespace {

constexpr size_t kGuard = 64;

void checkCopy(size_t n, size_t srcOff, size_t dstOff) {
  std::vector<uint8_t> src(n + srcOff + kGuard), dst(n + dstOff + 2 * kGuard, 0xA5);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 131 + n * 7 + 1);
  chorus::kernels::copy(dst.data() + kGuard + dstOff, src.data() + srcOff, n);
  for (size_t i = 0; i < dst.size(); ++i) {
    const bool inside = i >= kGuard + dstOff && i < kGuard + dstOff + n;
    const uint8_t want = inside ? src[i - kGuard - dstOff + srcOff] : 0xA5;
    ASSERT_EQ(dst[i], want) << "n=" << n << " srcOff=" << srcOff << " dstOff=" << dstOff << " at byte " << i
                            << (inside ? " (copied)" : " (outside the destination)");
  }
}

TEST(Copy, EveryLengthAroundTheThresholdAtEveryAlignment) {
  for (size_t n = 0; n <= 4200; n += (n < 64 || (n > 1980 && n < 2120)) ? 1 : 37)
    for (size_t so : {0, 1, 7, 31, 63})
      for (size_t d : {0, 1, 8, 33, 63}) checkCopy(n, so, d);
}

TEST(Copy, LargeCopies) {
  for (size_t n : {size_t{65536}, size_t{65536 + 3}, size_t{1} << 20, (size_t{4} << 20) + 129})
    for (size_t so : {0, 5})
      for (size_t d : {0, 11}) checkCopy(n, so, d);
}

}  // namespace
