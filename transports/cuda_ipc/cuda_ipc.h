// CUDA IPC for the memory table (chorusMemoryPlugin_v4_t's ipcExport, ipcOpen, ipcClose; Note [Device IPC] in
// transports/ipc/ipc_transport.cc), and which GPUs can reach each other (deviceCount, deviceId, peerAccess; Note
// [Peer access] in lib/comm/comm.cc).
#pragma once

#include <cstddef>
#include <cstdint>

namespace chorus::transport::cuda {

int ipcExport(int device, const void* p, uint8_t* handle, size_t* offset);
int ipcOpen(int device, const uint8_t* handle, void** base);
int ipcClose(int device, const uint8_t* handle, void* base);
int deviceCount(int* n);
int deviceId(int device, char* id, size_t len);
int peerAccess(int device, int other, int* yes);

}  // namespace chorus::transport::cuda
