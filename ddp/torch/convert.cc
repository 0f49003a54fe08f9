#include "ddp/torch/convert.h"

#include <c10/util/Exception.h>

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

chorusRedOp_t redOp(const c10d::ReduceOp& op, const at::Tensor& t) {
  const bool isBool = t.scalar_type() == at::kBool;
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return isBool ? chorusMax : chorusSum;
    case c10d::ReduceOp::PRODUCT: return isBool ? chorusMin : chorusProd;
    case c10d::ReduceOp::MIN: return chorusMin;
    case c10d::ReduceOp::MAX: return chorusMax;
    case c10d::ReduceOp::AVG:
      TORCH_CHECK(!isBool && at::isFloatingType(t.scalar_type()), "chorus: ReduceOp.AVG needs a floating-point ",
                  "tensor, got ", t.scalar_type());
      return chorusAvg;
    default: break;
  }
  const char* names[] = {"SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "PREMUL_SUM", "UNUSED"};
  TORCH_CHECK(false, "chorus: ReduceOp.", names[op.op_ < 10 ? op.op_ : 9], " is not supported (SUM, PRODUCT, MIN, ",
              "MAX and AVG are)");
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
