#include "lib/kernels/copy.h"

#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace chorus::kernels {

// Note [Bulk copy]: from 2 KiB on x86-64, with ERMS, a copy is one `rep movsb`, as glibc's memcpy did up to 2.39
// and still does on Intel. glibc 2.40 stopped using it on AMD Zen (its rep_movsb_threshold became the non-temporal
// threshold, about 400 MB here), and its vector loop made every shared-memory collective of the same build 2.2-2.6x
// slower on this project's AMD EPYC machine: all_reduce_perf -z 1, 2 ranks, 1 MiB, 172 against 78 us
// (docs/results/2026-12-07-bulk-copy.md). A library whose speed changes with the distribution's libc is not one
// anybody can reason about, so the strategy is Chorus's own. Under a sanitizer it is memcpy, which the sanitizer sees.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define CHORUS_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define CHORUS_SANITIZED 1
#endif
#endif
#if defined(__x86_64__) && !defined(CHORUS_SANITIZED)
#define CHORUS_REP_MOVSB 1
#endif

#ifdef CHORUS_REP_MOVSB
namespace {

constexpr size_t kRepMovsbMin = 2048;  // below it the vector moves of memcpy start faster
constexpr unsigned kErmsBit = 1u << 9;  // CPUID.(EAX=7, ECX=0):EBX[9], Enhanced REP MOVSB/STOSB

bool hasErms() {
  unsigned a, b, c, d;
  return __get_cpuid_count(7, 0, &a, &b, &c, &d) != 0 && (b & kErmsBit) != 0;
}

}  // namespace
#endif

void copy(void* dst, const void* src, size_t n) {
#ifdef CHORUS_REP_MOVSB
  static const bool erms = hasErms();
  if (n >= kRepMovsbMin && erms) {
    asm volatile("rep movsb" : "+D"(dst), "+S"(src), "+c"(n) : : "memory");
    return;
  }
#endif
  std::memcpy(dst, src, n);
}

}  // namespace chorus::kernels
