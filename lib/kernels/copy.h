// The bulk copy of Chorus's host data paths: shared-memory slots, direct reads within a process, host Space::copy.
#pragma once

#include <cstddef>

namespace chorus::kernels {

// Copies n bytes from src to dst, which must not overlap; any alignment (Note [Bulk copy] in copy.cc).
void copy(void* dst, const void* src, size_t n);

}  // namespace chorus::kernels
