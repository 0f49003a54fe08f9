// Shared-memory transport: ranks on one host (equal host identity) talk through a segment per pair
// (transports/shm/segment.h) and a unix-socket control channel per pair (transports/shm/control.h).
//
// Note [Shared-memory data path]
//  * Small messages travel inline: the sender copies them into FIFO slots, the receiver copies them out.
//  * From kRendezvousBytes up, the sender only publishes where its buffer is, and the receiver copies it
//    straight from the sender's memory into the destination: process_vm_readv(2) between processes, memcpy
//    between threads of one process. One copy instead of two, nothing staged in between, and the sender's CPU
//    is free meanwhile. The sender's request completes when the receiver releases the slot. If the receiver
//    cannot read the sender's memory (another pid namespace, ptrace restrictions; probed at connect time),
//    large messages travel inline too.
//  * Waiting: Comm::waitUntil spins/yields, then calls armWake() and sleeps in poll() on waitFd(). armWake()
//    raises this rank's `asleep` flag in every pair segment and re-checks for work; a peer that publishes or
//    releases a slot and sees the flag clears it and writes one Wake frame on the pair's socket. A seq_cst
//    fence on both sides (flag store, then FIFO load / FIFO store, then flag load) means no wake-up is lost.
//  * A peer is gone when its control socket closes; what it published before is still delivered, and only
//    then do operations that still need it fail, naming it and saying whether it said goodbye.
#pragma once

#include <memory>

#include "transports/transport.h"

namespace chorus::transport::shm {

// setup must outlive the transport; its peers and commId are read when connect/accept run.
std::unique_ptr<Transport> create(const Setup& setup);

}  // namespace chorus::transport::shm
