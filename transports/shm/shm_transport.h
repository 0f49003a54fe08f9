// Shared-memory transport: ranks on one host (equal host identity) talk through a segment per pair
// (transports/shm/segment.h) and a unix-socket control channel per pair (transports/shm/control.h).
//
// Note [Shared-memory data path]:
//  * Messages of up to kSmallBytes (24) travel inside the slot header's cache line: a one-line latency path.
//  * Larger ones stream through the FIFO's 64 KiB slots: the sender copies in, the receiver copies out, both
//    through cache-resident slots (16 per direction), so the pair works in parallel and nothing spills to DRAM.
//    The slot size is what counts, not the FIFO's capacity: each slot costs a header line that crosses cores
//    and a publish/release pair. Interleaved runs, all_reduce_perf float32 sum in place, busbw GB/s, slots x
//    slot size, medians of 3 (Open MPI vader in the same minutes for scale):
//        2 ranks          64K   256K    1M    4M   16M
//          64 x 8 KiB     7.3   8.0    8.9   8.3   6.5     (16 x 8 KiB and 512 x 8 KiB: no better)
//           8 x 64 KiB   10.2  12.3   12.5  13.1   9.2
//          16 x 64 KiB   10.0  11.4   11.7  12.9   9.3
//          32 x 64 KiB   11.0  12.6   11.6  13.1  10.7
//          16 x 128 KiB  10.8  12.7   11.4  12.7  10.9
//          Open MPI         -   4.1    4.9   5.3     -
//        2 ranks, 64/256 MiB (mean of 2 runs): 64 x 8 KiB 6.7/7.0, 16 x 64 KiB 8.4/8.5
//        4 ranks          64K   256K    1M    4M   16M   (2 runs, the better)
//          64 x 8 KiB     2.2   3.0    4.1   4.2   3.1
//           8 x 64 KiB    2.6   4.2    5.3   5.3   3.8
//          16 x 64 KiB    2.9   4.4    5.7   6.1   3.9
//    Beyond 64 KiB slots the differences are noise; 16 x 64 KiB is the smallest FIFO that holds its own with
//    4 ranks. 8-byte latency does not change (inline path). A pair's segment is 2 MiB.
//    A receive that reduces (irecvReduce) reduces straight out of the slots into its destination, so staging
//    costs no extra pass: per byte of allreduce a rank copies once and reduces (or copies) once, and DRAM sees
//    each input read once and each output written once (plus write-allocate), the 3nS bound of
//    ../shared/peers/results/SUMMARY.md.
//  * Optionally (CHORUS_SHM_DIRECT_BYTES), from a size up the sender only publishes where its buffer is and the
//    receiver copies it straight into the destination: process_vm_readv(2) between processes (probed at
//    connect time; off when not permitted), memcpy between threads of one process; the sender's request
//    completes when the receiver releases the slot. Measured with 8 KiB slots on this 2-core VM,
//    all_reduce_perf float32 sum, busbw GB/s out-of-place/in-place, direct from 64 KiB vs FIFO only:
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
//    both sides use seq_cst fences. A rank that sleeps on nearly every wait asks its peers to fence instead,
//    and then sleeps without membarrier (Note [Fenced publishes]). No wake-up is lost in any of these.
//  * A peer is gone when its control socket closes; what it published before is still delivered, and only
//    then do operations that still need it fail, naming it and saying whether it said goodbye.
#pragma once

#include <memory>

#include "transports/registry.h"

namespace chorus::transport::shm {

// The registry's entry (transports/registry.h). A transport's setup must outlive it; its peers and commId are
// read when connect/accept run.
Descriptor descriptor();

}  // namespace chorus::transport::shm
