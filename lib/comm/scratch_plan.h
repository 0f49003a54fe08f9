// The device scratch a call will ask for, found on the thread that issues it (Note [Scratch before the fence] in
// scratch_plan.cc).
#pragma once

#include <span>

#include "lib/comm/comm.h"

namespace chorus {

// What calls on device memory will ask for when they run, made on the issuing thread: device scratch, and the pinned
// buffers that stage their messages to peers no device route reaches.
struct CallMemory {
  DeviceScratch::Grant scratch;
  StagingPool::Grant bounces;
  bool empty() const { return scratch.empty() && bounces.empty(); }
  // The executing thread, as the calls start; throws the failure of an allocation, which fails the calls there.
  void adopt(Comm& comm);
};

// Grows comm's memory, now, to what `calls` will ask for (nothing for calls on host memory). The issuing thread
// calls it before it queues the calls' fences.
CallMemory growMemoryFor(Comm& comm, std::span<const CollArgs> calls);

}  // namespace chorus
