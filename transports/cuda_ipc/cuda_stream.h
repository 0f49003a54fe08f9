// The CUDA runtime's device streams for the memory table (chorusMemoryPlugin_v4_t's stream functions).
#pragma once

#include <cstdint>

namespace chorus::transport::cuda {

int streamOpen(void* native, int* device, void** stream);
int streamFence(void* stream, uint64_t* fence);
int streamReached(void* stream, uint64_t fence, int* reached);
int streamRelease(void* stream, uint64_t fence);
int streamSynchronize(void* stream);
void streamClose(void* stream);

}  // namespace chorus::transport::cuda
