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
// The Chorus op for a torch op on `dtype` (bool: SUM is logical or, as MAX; PRODUCT logical and, as MIN). Refuses
// BAND/BOR/BXOR/PREMUL_SUM naming the op.
chorusRedOp_t redOp(const c10d::ReduceOp& op, const at::Tensor& t);
// A CPU tensor, else refused naming `what` and saying how to give CUDA tensors to another backend.
void requireCpu(const at::Tensor& t, const char* what);
// Every tensor of the list has the shape and dtype of the first.
void requireSame(const std::vector<at::Tensor>& ts, const at::Tensor& like, const char* what);
// A single tensor in a list argument (torch passes lists; Chorus's calls take one buffer per rank).
const at::Tensor& single(const std::vector<at::Tensor>& ts, const char* what);

}  // namespace chorus::torchpg
