// A communicator's scratch memory on its device, by slot (algo::Context::scratch), and how it grows: on the thread
// that issues a call, before the call's fences hold any stream, rather than in the middle of the call (Note
// [Scratch before the fence] in scratch_plan.cc).
#pragma once

#include <array>
#include <cstddef>
#include <mutex>
#include <optional>
#include <vector>

#include "lib/base/error.h"
#include "lib/mem/space.h"

namespace chorus {

class DeviceScratch {
 public:
  // Blocks grown for a call, not yet the communicator's; released by the destructor unless adopted.
  class Grant {
   public:
    Grant() = default;
    Grant(Grant&& o) noexcept : device_(o.device_), blocks_(std::move(o.blocks_)), failure_(std::move(o.failure_)) {
      o.blocks_.clear();
      o.failure_.reset();
    }
    Grant& operator=(Grant&&) = delete;
    ~Grant();
    bool empty() const { return blocks_.empty() && !failure_; }

   private:
    friend class DeviceScratch;
    struct Block {
      int slot;
      void* p;
      size_t bytes;
      size_t plannedBefore;  // the slot's planned size, restored when the allocation fails
    };
    mem::Device* device_ = nullptr;
    std::vector<Block> blocks_;
    std::optional<Error> failure_;  // the allocation's, thrown where the call runs
  };

  explicit DeviceScratch(mem::Device* device) : device_(device) {}
  ~DeviceScratch();  // after every operation that used it has ended
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;

  static constexpr int kSlots = 8;  // the algorithms' and the PreMulSum pass's slots are fewer
  // Throws chorusInternalError for a slot that is not one of them.
  static void checkSlot(int slot);

  // Any thread that issues calls: a block for each slot whose size, as planned so far, is below bytesBySlot[slot].
  // When the device cannot allocate, the grant carries the error instead: adopt throws it inside the call, which
  // fails as a failure of the call's own work does (its peers are told).
  Grant grow(const std::vector<size_t>& bytesBySlot);
  // The executing thread, as a call starts: the grant's blocks replace smaller ones; throws the grant's failure.
  void adopt(Grant& grant);
  // The executing thread: slot's block, at least `bytes`; allocated here only for a call that was not planned.
  uint8_t* get(size_t bytes, int slot);

 private:
  struct Slot {
    void* p = nullptr;
    size_t bytes = 0;  // of p (executing thread)
    size_t planned = 0;  // the most any grant or get has made for it (under mu_)
  };
  Slot& slot(int s);

  mem::Device* device_;
  std::mutex mu_;
  std::array<Slot, kSlots> slots_;
};

}  // namespace chorus
