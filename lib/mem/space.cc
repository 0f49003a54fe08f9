#include "lib/mem/space.h"

#include <sys/uio.h>
#include <unistd.h>

namespace chorus::mem {

void Space::reduceN(void* dst, const void* const* srcs, int n, size_t count, chorusDataType_t dt,
                    chorusRedOp_t op) const {
  if (dev_ != nullptr) return dev_->reduceN(dst, srcs, n, count, dt, op);
  if (n == 1) return copy(dst, srcs[0], count * kernels::dataTypeSize(dt));
  kernels::reduce(dst, srcs[0], srcs[1], count, dt, op);
  for (int i = 2; i < n; ++i) kernels::reduce(dst, dst, srcs[i], count, dt, op);
}

void setRuntime(Runtime* c) { detail::gRuntime.store(c, std::memory_order_release); }

bool readable(const void* p) {
  char byte;
  iovec local{&byte, 1}, remote{const_cast<void*>(p), 1};
  return process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == 1;
}

Runtime* runtime() { return detail::gRuntime.load(std::memory_order_acquire); }

Space currentSpace() {
  Runtime* c = detail::gRuntime.load(std::memory_order_acquire);
  return Space(c != nullptr ? c->current() : nullptr);
}

}  // namespace chorus::mem
