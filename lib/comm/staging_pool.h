// The pinned host buffers that stage device memory for host transports (Note [Staging device memory] in comm.cc),
// pooled by size class (mem::bounceSizeClass) for the communicator's life, and grown on the thread that issues a call
// before the call's fences where the call will need more than the pool has (Note [Scratch before the fence] in
// scratch_plan.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "lib/base/error.h"
#include "lib/mem/space.h"

namespace chorus {

class StagingPool {
 public:
  // Buffers made for a call, not yet the pool's; released by the destructor unless adopted.
  class Grant {
   public:
    Grant() = default;
    Grant(Grant&& o) noexcept : device_(o.device_), buffers_(std::move(o.buffers_)), failure_(std::move(o.failure_)) {
      o.buffers_.clear();
      o.failure_.reset();
    }
    Grant& operator=(Grant&&) = delete;
    ~Grant();
    bool empty() const { return buffers_.empty() && !failure_; }

   private:
    friend class StagingPool;
    mem::Device* device_ = nullptr;
    std::vector<std::pair<int, uint8_t*>> buffers_;  // (size class, buffer)
    std::optional<Error> failure_;  // an allocation's, thrown where the call runs
  };

  explicit StagingPool(mem::Device* device) : device_(device) {}
  ~StagingPool();  // every buffer is back in the pool by now
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;

  // Any thread that issues calls: buffers so that the pool holds at least countByClass[c] of class c. When the
  // device cannot allocate, the grant carries the error, as DeviceScratch::grow's does.
  Grant grow(const std::vector<int>& countByClass);
  // The executing thread: the grant's buffers join the pool; throws the grant's failure.
  void adopt(Grant& grant);
  // The executing thread: a free buffer of the class, made here when there is none (a call that was not planned).
  uint8_t* take(int sizeClass);
  void give(int sizeClass, uint8_t* p);

 private:
  int& made(int sizeClass);  // under mu_

  mem::Device* device_;
  std::mutex mu_;
  std::vector<int> made_;  // by class: buffers made for the pool, granted or not (under mu_)
  std::vector<std::vector<uint8_t*>> free_;  // by class (executing thread)
};

}  // namespace chorus
