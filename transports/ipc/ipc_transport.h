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

// Note [Device IPC chunks]:
// The pipeline chunk of a device call whose every peer is reached device to device. The host transports' chunks
// (1 MiB for shared memory) suit a CPU that copies each byte itself; here the host only passes a descriptor per
// chunk, and each costs a fixed few microseconds of host work (publish, map lookup, a copy or kernel launched, its
// event polled) against a transfer that is fast: ranks that share an H100 move a 1 MiB chunk's reduction (3 MiB of
// traffic at about 2.8 TB/s, shared by two ranks) in about 2 us, so 1 MiB chunks would leave the device waiting for
// the host. With 16 MiB the transfer (about 35 us) outweighs the host's part several times over. Larger chunks lose
// nothing on ranks sharing a GPU (every byte goes through the same memory, however it is cut), and a ring over
// devices of their own keeps every link busy at each step without chunking. Every rank computes the same choice
// (Comm::connectDeviceRoutes), as the algorithms' chunking must agree; CHORUS_CHUNK_BYTES still fixes it.
constexpr size_t kChunkBytes = size_t{16} << 20;

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
