// What differs between the torch releases chorus_torch builds against (1.13, Debian 12's; 2.x, as 2.6 in Debian 13),
// chosen by torch's own version macros, in one place: the other files are written against current torch.
//
// Note [Backend or ProcessGroup]:
// From torch 2.0 a third-party backend is a c10d::Backend: torch wraps it in its own ProcessGroup, which dispatches
// each call by the tensors' device, names the group (setGroupUid), and runs coalescing through it; torch 1.13 has no
// such wrapper, and a backend there is a c10d::ProcessGroup subclass. The two classes declare the same operations
// with the same signatures, except coalescing (endCoalescing returns the Work in 2.x; 1.13 hands the Works of the
// coalesced calls instead) and the calls 2.x added (the *_tensor_coalesced pair). Failures of a backend raise
// DistBackendError in 2.x (a RuntimeError subclass in Python); 1.13 has no such class, so RuntimeError.
#pragma once

#include <torch/version.h>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#define CHORUS_TORCH_BACKEND 1
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#define CHORUS_TORCH_BACKEND 0
#endif
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <c10/util/Exception.h>

#include <exception>
#include <string>

namespace chorus::torchpg {

#if CHORUS_TORCH_BACKEND
using BackendBase = c10d::Backend;
#else
using BackendBase = c10d::ProcessGroup;
#endif

#if CHORUS_TORCH_BACKEND
constexpr c10d::OpType kCoalescedOpType = c10d::OpType::COALESCED;
#else
constexpr c10d::OpType kCoalescedOpType = c10d::OpType::UNKNOWN;  // 1.13 has no COALESCED
#endif

// PREMUL_SUM's factor as torch holds it: a double, or a one-element tensor (1.13 kept one tensor per device).
struct PreMulFactor {
  double value = 0;
  at::Tensor tensor;  // undefined: the double
};
inline PreMulFactor preMulFactor(const c10d::ReduceOp& op) {
  const auto* s = dynamic_cast<const c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
  TORCH_CHECK(s != nullptr, "chorus: ReduceOp.PREMUL_SUM came without its factor (make it with ",
              "torch.distributed._make_nccl_premul_sum)");
#if CHORUS_TORCH_BACKEND
  return {.value = s->double_factor, .tensor = s->tensor_factor};
#else
  return {.value = s->double_factor, .tensor = s->tensor_factors.empty() ? at::Tensor() : s->tensor_factors[0]};
#endif
}

// A communication failure as torch raises one: DistBackendError where it exists.
[[noreturn]] inline void throwBackendError(const std::string& text) {
#if CHORUS_TORCH_BACKEND
  C10_THROW_ERROR(DistBackendError, text);
#else
  TORCH_CHECK(false, text);
#endif
}

inline std::exception_ptr backendError(const std::string& text) {
  try {
    throwBackendError(text);
  } catch (...) {
    return std::current_exception();
  }
}

}  // namespace chorus::torchpg
