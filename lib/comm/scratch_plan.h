// The device scratch a call will ask for, found on the thread that issues it (Note [Scratch before the fence] in
// scratch_plan.cc).
#pragma once

#include <span>

#include "lib/comm/comm.h"

namespace chorus {

// Grows comm's device scratch, now, to what `calls` will ask for when they run (nothing for calls on host memory).
// The issuing thread calls it before it queues the calls' fences; the executing thread adopts the result
// (DeviceScratch::adopt) as they start, and fail there when the device could not allocate.
DeviceScratch::Grant growScratchFor(Comm& comm, std::span<const CollArgs> calls);

}  // namespace chorus
