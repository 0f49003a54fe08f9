// The process's device runtime as communicators and the API find it: loaded through the plugins when the process
// may hand over device memory (Note [Memory plugins]), and device memory allocated through it.
#pragma once

#include <cstddef>
#include <string>

#include "lib/mem/space.h"

namespace chorus {

// Loads the plugins when the process has a device driver loaded (or whenever `always`), so that a device runtime
// registers, or, failing that, the driver's probe (Note [A driver without its plugin]). The runtime or nullptr.
mem::Runtime* findDeviceRuntime(bool always);
// While no runtime is registered: true when one registered since the last look (Note [A driver loaded later]).
bool deviceRuntimeAppeared();
// Why there is none: the memory plugins seen and what became of them; *code = the result to fail with.
std::string whyNoRuntime(chorusResult_t* code);

// chorusMemAlloc / chorusMemFree: memory of the calling thread's current device. Throw chorus::Error.
void* deviceAllocate(size_t bytes);
void deviceFree(void* p);

}  // namespace chorus
