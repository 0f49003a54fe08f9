// Shared-memory transport: ranks on one host (equal host identity) talk through a segment per pair
// (transports/shm/segment.h) and a unix-socket control channel per pair (transports/shm/control.h).
//
// Note [Shared-memory data path]
//  * Messages of up to kSmallBytes (24) travel inside the slot header's cache line: a one-line latency path.
//  * Larger ones stream through the FIFO's 8 KiB slots: the sender copies in, the receiver copies out, both
//    through cache-resident slots (64 per direction), so the pair works in parallel and nothing spills to DRAM.
//    A receive that reduces (irecvReduce) reduces straight out of the slots into its destination, so staging
//    costs no extra pass: per byte of allreduce a rank copies once and reduces (or copies) once, and DRAM sees
//    each input read once and each output written once (plus write-allocate), the 3nS bound of
//    ../shared/peers/results/SUMMARY.md.
//  * Optionally (CHORUS_SHM_DIRECT_BYTES), from a size up the sender only publishes where its buffer is and the
//    receiver copies it straight into the destination: process_vm_readv(2) between processes (probed at
//    connect time; off when not permitted), memcpy between threads of one process; the sender's request
//    completes when the receiver releases the slot. Measured on this 2-core VM, all_reduce_perf float32 sum,
//    busbw GB/s out-of-place/in-place, direct from 64 KiB vs FIFO only (-n 100, -z 1):
//        2 ranks   64K 1.7/2.5 vs 6.7/9.1   256K 2.9/3.0 vs 8.0/9.0   1M 6.4/5.3 vs 9.2/9.8
//                   4M 5.9/5.1 vs 8.4/9.0    16M 4.0/5.3 vs 6.4/7.5   64M 4.3/5.5 vs 5.5/6.4
//        4 ranks  256K 1.5/1.3 vs 3.2/3.4     2M 2.9/3.5 vs 4.4/5.3   16M 1.9/2.1 vs 2.7/2.8
//    process_vm_readv pins the sender's pages on every call, which costs more here than the second copy
//    through cache, so the FIFO is the default everywhere (CHORUS_SHM_DIRECT_BYTES=0).
//  * Waiting: Comm::waitUntil spins/yields, then calls armWake() and sleeps in poll() on waitFd(). armWake()
//    raises this rank's `asleep` flag in every pair segment and re-checks for work; a peer that publishes or
//    releases a slot and sees the flag clears it and writes one Wake frame on the pair's socket. The flag and
//    FIFO accesses form a Dekker pattern: the sleeper issues membarrier(GLOBAL_EXPEDITED), so the data path
//    needs no fence (a full fence there would stall every send on the slot's cache line); without membarrier
//    both sides use seq_cst fences. No wake-up is lost either way.
//  * A peer is gone when its control socket closes; what it published before is still delivered, and only
//    then do operations that still need it fail, naming it and saying whether it said goodbye.
#pragma once

#include <memory>

#include "transports/transport.h"

namespace chorus::transport::shm {

// setup must outlive the transport; its peers and commId are read when connect/accept run.
std::unique_ptr<Transport> create(const Setup& setup);

}  // namespace chorus::transport::shm
