// libchorus-cuda_ipc.so: the CUDA device runtime (cuda_memory.cc). libchorus.so loads it in a process with the
// CUDA driver loaded (transports/plugin_memory.h), so that libchorus.so itself never links libcudart.
#include "transports/plugin.h"

namespace chorus::transport::cuda {
const chorusMemoryPlugin_v4_t* memoryTable();
}

extern "C" __attribute__((visibility("default"))) const chorusMemoryPlugin_v4_t chorusMemoryPlugin_v4 =
    *chorus::transport::cuda::memoryTable();
