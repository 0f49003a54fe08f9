// Exported functions: the reduction ops a user makes (NCCL's ncclRedOpCreatePreMulSum and ncclRedOpDestroy), kept
// by their communicator (Note [Made ops] in lib/comm/made_ops.h) and resolved by the collectives' validation.
#include <cstdint>
#include <cstring>

#include "lib/api/api_guard.h"
#include "lib/api/registry.h"
#include "lib/comm/comm.h"
#include "lib/comm/devices.h"
#include "lib/kernels/reduce.h"
#include "lib/mem/space.h"

using namespace chorus;

namespace {

template <typename... Args>
[[noreturn]] void refuse(const char* fn, const Comm& comm, fmt::format_string<Args...> f, Args&&... args) {
  throw Error(chorusInvalidArgument,
              fmt::format("{} on rank {}: {}", fn, comm.rank(), fmt::format(f, std::forward<Args>(args)...)));
}

}  // namespace

extern "C" {

chorusResult_t chorusRedOpCreatePreMulSum(chorusRedOp_t* op, const void* scalar, chorusDataType_t datatype,
                                          chorusComm_t comm) {
  return apiCall(comm, [&] {
    constexpr const char* fn = "chorusRedOpCreatePreMulSum";
    CallRef ref(comm, "comm");
    const int dt = rawEnum(datatype);
    if (op == nullptr) refuse(fn, *ref, "op (the output) is NULL");
    if (dt < 0 || dt > chorusBfloat16) refuse(fn, *ref, "datatype={} is not a chorusDataType_t", dt);
    const char* type = kernels::dataTypeName(datatype);
    if (scalar == nullptr) refuse(fn, *ref, "scalar is NULL (it must point to one {} in host memory)", type);
    // Host memory only (NCCL's ncclScalarHostImmediate): the scalar is read now, on this thread.
    if (mem::anyDevices() || deviceRuntimeAppeared()) {  // Note [A driver loaded later]
      const mem::Space s = mem::classify(scalar);
      if (!s.isHost())
        refuse(fn, *ref, "scalar {} is {} memory; the scalar must be in host memory (it is read at this call)", scalar,
               s.name());
      if (!mem::readable(scalar)) refuse(fn, *ref, "scalar {} is not memory this process can read", scalar);
    }
    PreMulSumOp made{.dtype = datatype};
    std::memcpy(&made.scalar, scalar, kernels::dataTypeSize(datatype));
    *op = ref->madeOps().create(made);
  });
}

chorusResult_t chorusRedOpDestroy(chorusRedOp_t op, chorusComm_t comm) {
  return apiCall(comm, [&] {
    constexpr const char* fn = "chorusRedOpDestroy";
    CallRef ref(comm, "comm");
    const int v = rawEnum(op);
    if (v >= 0 && v < chorusNumOps)
      refuse(fn, *ref, "op={} ({}) is a built-in op: only ops of chorusRedOpCreatePreMulSum are destroyed", v,
             kernels::redOpName(op));
    if (v < 0 || !ref->madeOps().destroy(op))
      refuse(fn, *ref, "op={} is not an op of this communicator (destroyed already, made on another "
             "communicator, or never made)", v);
  });
}

}  // extern "C"
