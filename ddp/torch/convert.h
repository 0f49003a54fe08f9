// What torch's tensors and reduce ops are in Chorus's terms, and the checks before anything is sent: each refusal
// is a c10::Error (Python's RuntimeError) naming the argument.
#pragma once

#include <torch/csrc/distributed/c10d/Types.hpp>

#include <string>
#include <vector>

#include "chorus/chorus.h"

namespace chorus::torchpg {

// The Chorus datatype of a tensor's elements; bool travels as uint8. Refuses the others naming `what`.
chorusDataType_t dataType(const at::Tensor& t, const char* what);
// A torch reduction in Chorus's terms: an op of the C API, or PREMUL_SUM's factor, for which an op is made on the
// communicator for each call (issue() below). bool: SUM is logical or, as MAX; PRODUCT logical and, as MIN; the
// bitwise ops work on it as on uint8. Refuses (naming the op and dtype) AVG and PREMUL_SUM off floating-point
// tensors, and BAND/BOR/BXOR off integer and bool ones.
struct Reduction {
  chorusRedOp_t op = chorusSum;
  at::Tensor factor;  // PREMUL_SUM: one element of the tensor's dtype; undefined otherwise
};
Reduction reduction(const c10d::ReduceOp& op, const at::Tensor& t);
// fn(op) with r's op on comm: PREMUL_SUM's is made for the call (chorusRedOpCreatePreMulSum) and freed once fn has
// issued it. Returns what fn or Chorus returned. A template, so no call wraps fn in a std::function.
template <class Fn>
chorusResult_t issue(const Reduction& r, chorusComm_t comm, chorusDataType_t dt, Fn&& fn) {
  if (!r.factor.defined()) return fn(r.op);
  chorusRedOp_t op;
  if (chorusResult_t rc = chorusRedOpCreatePreMulSum(&op, r.factor.data_ptr(), dt, comm)) return rc;
  const chorusResult_t rc = fn(op);
  chorusRedOpDestroy(op, comm);  // the calls issued with it keep their factor
  return rc;
}
// A CPU tensor, else refused naming `what` and saying how to give CUDA tensors to another backend.
void requireCpu(const at::Tensor& t, const char* what);
// Every tensor of the list has the shape and dtype of the first.
void requireSame(const std::vector<at::Tensor>& ts, const at::Tensor& like, const char* what);
// A single tensor in a list argument (torch passes lists; Chorus's calls take one buffer per rank).
const at::Tensor& single(const std::vector<at::Tensor>& ts, const char* what);

}  // namespace chorus::torchpg
