// Device IPC: ranks of one host whose calls are on device memory move it device to device, through the memory
// plugin's IPC primitives (transports/plugin.h: CUDA IPC for CUDA), not through host memory. Not a transport the
// registry chooses per pair: the communicator adds it, beside a pair's host transport, for its device calls (Note
// [Device routes] in lib/comm/comm.cc). See Note [Device IPC] in ipc_transport.cc.
#pragma once

#include <memory>

#include "lib/mem/space.h"
#include "transports/transport.h"

namespace chorus::transport::ipc {

constexpr const char* kName = "ipc";  // how the bootstrap names what a rank offers

// One per communicator, for the device's memory; serves every peer it is connected to. Setup: connect (the lower
// rank of a pair: creates their page, never waits) to all higher peers, accept (waits for the page) from all lower
// ones, then awaitPeers (until the higher peers have attached).
class DeviceTransport : public Transport {
 public:
  virtual void awaitPeers(std::chrono::steady_clock::time_point deadline) = 0;
};

// `setup` outlives it. reduceOnReceive: irecvReduce runs the device's reduction reading the peer's buffer (where it
// has reduceStart); otherwise it posts nothing and the algorithm receives into scratch and reduces after.
std::unique_ptr<DeviceTransport> create(const Setup& setup, mem::Device* device, bool reduceOnReceive);

}  // namespace chorus::transport::ipc
