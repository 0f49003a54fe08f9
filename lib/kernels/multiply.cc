// PreMulSum's first step on the CPU: every element times one scalar, with element.h's chorusProd arithmetic, so
// the rounding is the reduction kernels' (and the CUDA kernels') own.
#include <cstring>

#include "lib/kernels/element.h"
#include "lib/kernels/reduce.h"

namespace chorus::kernels {

void multiply(void* dst, const void* src, size_t count, chorusDataType_t dt, const void* scalar) {
  elem::withType(dt, [&](auto tag) {
    constexpr chorusDataType_t D = decltype(tag)::value;
    using S = elem::Storage<D>;
    S k;
    std::memcpy(&k, scalar, sizeof k);
    auto* d = static_cast<unsigned char*>(dst);
    const auto* s = static_cast<const unsigned char*>(src);
    // memcpy element access: any alignment; dst == src reads each element before writing it.
    for (size_t i = 0; i < count; ++i) {
      S x;
      std::memcpy(&x, s + i * sizeof(S), sizeof x);
      const S r = elem::apply<D, chorusProd>(x, k);
      std::memcpy(d + i * sizeof(S), &r, sizeof r);
    }
  });
}

uint64_t avgScalar(chorusDataType_t dt, int nranks) {
  auto bits = [&](auto e) {
    const auto s = decltype(e)::store(static_cast<float>(1.0 / nranks));
    uint64_t out = 0;
    std::memcpy(&out, &s, sizeof s);
    return out;
  };
  if (dt == chorusFloat16) return bits(elem::Elem<chorusFloat16>{});
  if (dt == chorusBfloat16) return bits(elem::Elem<chorusBfloat16>{});
  return 0;
}

}  // namespace chorus::kernels
