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

// Note [Chunk and segments]: on one host TCP runs over the loopback device, whose 64 KiB MTU makes segments of
// about 65480 bytes, and with TCP_NODELAY every frame (the 64-byte header and its chunk) leaves as whole segments
// plus one for its remainder. On these machines a segment costs more than its bytes (the loopback path, the
// guest's interrupt handling), so a frame just over a multiple of the segment is the worst size there is: 128 KiB
// chunks (frames of two segments and 170 bytes) ran at half the busbw of chunks 300 bytes smaller. The chunk is
// therefore the largest that keeps a frame within two segments, with room for IPv6's smaller ones (65464 bytes
// with timestamps); the ring cuts a segment into equal chunks of at most this, so its frames never spill into a
// third. Bigger frames cost cache locality with 4 ranks on 2 cores. Measurements in docs/performance.md.
constexpr size_t kChunkBytes = 255 * 512;  // 127.5 KiB
constexpr size_t kLoopbackSegmentBytes = 65536 - 40 - 20 - 12;  // MTU less IPv6, TCP and timestamp headers

// The registry's entry (transports/registry.h). A transport's setup must outlive it; its peers and commId are
// read when connect/accept run.
Descriptor descriptor();

}  // namespace chorus::transport::tcp
