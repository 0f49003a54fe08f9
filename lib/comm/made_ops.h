// The reduction ops a communicator's user made with chorusRedOpCreatePreMulSum, by the chorusRedOp_t value each
// was given.
//
// Note [Made ops]: values start at chorusNumOps and come from one counter for the whole process, so no value is
// live on two communicators at once: a value used on another communicator than its own, or after
// chorusRedOpDestroy, is not found and the call is refused. After 2^31 - chorusNumOps ops the counter wraps,
// skipping the values still live on the communicator asking. Only live ops are kept. Any thread may make, destroy
// and use ops at once (a mutex, taken only by calls that name a made op).
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "chorus/chorus.h"

namespace chorus {

struct PreMulSumOp {
  chorusDataType_t dtype = chorusFloat32;
  uint64_t scalar = 0;  // the scalar's bytes (the first dtype-size ones)
};

class MadeOps {
 public:
  chorusRedOp_t create(const PreMulSumOp& op);
  bool destroy(chorusRedOp_t op);  // false when op is not live here
  std::optional<PreMulSumOp> find(chorusRedOp_t op) const;

 private:
  mutable std::mutex mu_;
  std::unordered_map<int, PreMulSumOp> live_;
};

}  // namespace chorus
