// libchorus.so's side of memory plugins (Note [Memory plugins], transports/plugin.h): a loaded table becomes the
// process's device runtime (mem::Runtime), its devices mem::Devices whose calls forward to the table and throw
// its errors as chorus::Error.
#pragma once

#include <string>
#include <vector>

#include "transports/plugin.h"

namespace chorus::transport {

// Makes table the process's device runtime; "" when it is, else why not (one is registered already, or the
// runtime says it cannot run here). The table stays valid for the process's life.
std::string registerMemoryPlugin(const chorusMemoryPlugin_v4_t* table, const std::string& file);

// Every memory plugin seen and what became of it ("cuda from /path/libchorus-cuda_ipc.so: registered", or
// "...: not available: CUDA driver version is insufficient for CUDA runtime version"), for chorus_info.
std::vector<std::string> memoryPlugins();

// True when the process has a device driver loaded (libcuda.so.1), so that its buffers may be device memory: a
// communicator created then loads the plugins (Note [Loading plugins on demand]).
bool deviceDriverInProcess();

// With the driver loaded but no device runtime registered (its plugin missing or not available), makes the
// driver's own view of pointers the runtime, so that the API refuses device memory instead of reading it (Note [A
// driver without its plugin]). Call after the plugins were loaded.
void probeDeviceDriver();

}  // namespace chorus::transport
