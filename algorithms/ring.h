// Ring topology math: pure functions, unit-tested in test/test_ring_math.cc.
#pragma once

#include <cstddef>

namespace chorus::algo {

inline int mod(long a, int n) { return static_cast<int>(((a % n) + n) % n); }

// A buffer of `count` elements cut into n segments whose sizes differ by at most one element.
inline size_t segmentLength(size_t count, int n, int s) {
  size_t q = count / static_cast<size_t>(n), rem = count % static_cast<size_t>(n);
  return q + (static_cast<size_t>(s) < rem ? 1 : 0);
}
inline size_t segmentOffset(size_t count, int n, int s) {
  size_t q = count / static_cast<size_t>(n), rem = count % static_cast<size_t>(n);
  size_t us = static_cast<size_t>(s);
  return us * q + (us < rem ? us : rem);
}

// Chunk c of C of a segment of len elements: [chunkBegin(c), chunkBegin(c+1)).
inline size_t chunkBegin(size_t len, size_t chunks, size_t c) { return len * c / chunks; }

// At ring step j rank r sends segment (r - j + shift) mod n and receives (r - j - 1 + shift) mod n, so what
// it forwards at step j+1 is exactly what it received at step j.
inline int ringSendSegment(int r, int j, int shift, int n) { return mod(static_cast<long>(r) - j + shift, n); }
inline int ringRecvSegment(int r, int j, int shift, int n) { return mod(static_cast<long>(r) - j - 1 + shift, n); }

}  // namespace chorus::algo
