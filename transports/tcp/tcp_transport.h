// TCP transport: non-blocking sockets driven by one edge-triggered epoll set, CHORUS_NSOCKS data connections
// per peer plus one control connection that only ever carries goodbye and abort frames, so a failing rank can
// always tell its peers why, even when its data connections are stuck mid-frame. Messages of at least kSplitBytes are cut into one part per connection so that several kernel copies
// run at once; smaller ones travel whole on connection 0. Every part is framed by a 64-byte WireHeader that
// repeats the message's OpTag (Note [Message tags] in transports/transport.h).
//
// Buffering is bounded: a receiver reads a part's header, then leaves the payload in the kernel until a
// matching receive is posted, so no peer can make this rank allocate.
#pragma once

#include <memory>

#include "transports/registry.h"

namespace chorus::transport::tcp {

constexpr size_t kSplitBytes = 128 * 1024;

// The registry's entry (transports/registry.h). A transport's setup must outlive it; its peers and commId are
// read when connect/accept run.
Descriptor descriptor();

}  // namespace chorus::transport::tcp
