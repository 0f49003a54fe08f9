// CUDA IPC for the memory table (chorusMemoryPlugin_v3_t's ipcExport, ipcOpen, ipcClose; Note [Device IPC] in
// transports/ipc/ipc_transport.cc).
#pragma once

#include <cstddef>
#include <cstdint>

namespace chorus::transport::cuda {

int ipcExport(int device, const void* p, uint8_t* handle, size_t* offset);
int ipcOpen(int device, const uint8_t* handle, void** base);
int ipcClose(int device, const uint8_t* handle, void* base);

}  // namespace chorus::transport::cuda
