#include "ddp/torch/convert.h"

#include <c10/util/Exception.h>

#include "ddp/torch/compat.h"

namespace chorus::torchpg {

chorusDataType_t dataType(const at::Tensor& t, const char* what) {
  switch (t.scalar_type()) {
    case at::kChar: return chorusInt8;
    case at::kByte: return chorusUint8;
    case at::kBool: return chorusUint8;
    case at::kInt: return chorusInt32;
    case at::kLong: return chorusInt64;
    case at::kHalf: return chorusFloat16;
    case at::kFloat: return chorusFloat32;
    case at::kDouble: return chorusFloat64;
    case at::kBFloat16: return chorusBfloat16;
    default: break;
  }
  TORCH_CHECK(false, "chorus: ", what, " has dtype ", t.scalar_type(), ", which Chorus does not reduce or move ",
              "(int8, uint8, bool, int32, int64, float16, bfloat16, float32, float64 are supported)");
}

Reduction reduction(const c10d::ReduceOp& op, const at::Tensor& t) {
  const at::ScalarType type = t.scalar_type();
  const bool isBool = type == at::kBool, isInteger = at::isIntegralType(type, /*includeBool=*/true);
  const char* names[] = {"SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "PREMUL_SUM", "UNUSED"};
  const char* name = names[op.op_ < 10 ? op.op_ : 9];
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return {.op = isBool ? chorusMax : chorusSum, .factor = {}};
    case c10d::ReduceOp::PRODUCT: return {.op = isBool ? chorusMin : chorusProd, .factor = {}};
    case c10d::ReduceOp::MIN: return {.op = chorusMin, .factor = {}};
    case c10d::ReduceOp::MAX: return {.op = chorusMax, .factor = {}};
    case c10d::ReduceOp::AVG:
      TORCH_CHECK(at::isFloatingType(type), "chorus: ReduceOp.AVG needs a floating-point tensor, got ", type);
      return {.op = chorusAvg, .factor = {}};
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR:
      TORCH_CHECK(isInteger, "chorus: ReduceOp.", name, " needs an integer or bool tensor, got ", type);
      return {.op = op.op_ == c10d::ReduceOp::BAND  ? chorusBand
                    : op.op_ == c10d::ReduceOp::BOR ? chorusBor
                                                    : chorusBxor,
              .factor = {}};
    case c10d::ReduceOp::PREMUL_SUM: {
      TORCH_CHECK(at::isFloatingType(type), "chorus: ReduceOp.PREMUL_SUM needs a floating-point tensor, got ", type);
      const PreMulFactor f = preMulFactor(op);
      at::Tensor factor = f.tensor.defined() ? f.tensor : at::scalar_tensor(f.value, at::kDouble);
      TORCH_CHECK(factor.numel() == 1 && factor.device().is_cpu(), "chorus: ReduceOp.PREMUL_SUM's factor must be ",
                  "one element in CPU memory, got ", factor.numel(), " on ", factor.device());
      return {.op = chorusSum, .factor = factor.to(type).contiguous()};
    }
    default: break;
  }
  TORCH_CHECK(false, "chorus: ReduceOp.", name, " is not a reduction Chorus knows");
}

void requireCpu(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.device().is_cpu(), "chorus: ", what, " is on ", t.device(), ": the \"chorus\" backend takes CPU ",
              "tensors. For CUDA tensors give each device its backend: ",
              "init_process_group(backend=\"cpu:chorus,cuda:nccl\")");
}

void requireSame(const std::vector<at::Tensor>& ts, const at::Tensor& like, const char* what) {
  for (size_t i = 0; i < ts.size(); ++i) {
    requireCpu(ts[i], what);
    TORCH_CHECK(ts[i].sizes() == like.sizes() && ts[i].scalar_type() == like.scalar_type(), "chorus: ", what, "[", i,
                "] has shape ", ts[i].sizes(), " and dtype ", ts[i].scalar_type(), ", expected ", like.sizes(),
                " and ", like.scalar_type());
  }
}

const at::Tensor& single(const std::vector<at::Tensor>& ts, const char* what) {
  TORCH_CHECK(ts.size() == 1, "chorus: ", what, " must hold exactly one tensor (one device per rank), got ",
              ts.size());
  requireCpu(ts[0], what);
  return ts[0];
}

}  // namespace chorus::torchpg
