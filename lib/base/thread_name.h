// Names the threads Chorus starts, so that top -H, perf, gdb and /proc/PID/task/*/comm tell them from the
// application's own (NCCL names its threads the same way).
#pragma once

namespace chorus {

// Sets the calling thread's name; Linux keeps the first 15 bytes. Naming is best effort: a failure changes nothing.
void nameThisThread(const char* name);

}  // namespace chorus
