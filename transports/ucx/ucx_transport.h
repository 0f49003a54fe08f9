// UCX transport: tagged messages over one UCP worker per communicator, on whatever UCX picks (tcp, shared
// memory, InfiniBand where present). Note [UCX transport] in ucx_transport.cc has the design.
#pragma once

#include <cstddef>
#include <memory>

#include "transports/transport.h"

namespace chorus::transport::ucx {

// Messages of up to this many payload bytes travel as one message copied through a bounce buffer, header first;
// larger ones as a header message followed by the payload, straight from and into the caller's buffers.
constexpr size_t kCopyBytes = 16 * 1024;
constexpr size_t kMaxAbortText = 4096;

// setup must outlive the transport; its peers and commId are read when connect/accept run. peerErrorMode: ask
// for UCP_ERR_HANDLING_MODE_PEER (CHORUS_UCX_ERROR_MODE=peer), else endpoints are made in mode NONE.
std::unique_ptr<Transport> create(const Setup& setup, bool peerErrorMode);

}  // namespace chorus::transport::ucx
