#!/usr/bin/python3
"""The least a blocking all_reduce through torch can cost: torch's own path with a backend that does nothing, then
Chorus's C call on the same tensor, in the same process.

Each of the ranks of a chorusrun job holds a Chorus communicator (through ctypes) and a torch process group over
torch's fake backend (torch.testing's FakeProcessGroup: it moves nothing and returns a finished Work). Per call it
runs `dist.all_reduce(t)` over the fake group, which costs what torch's Python and dispatcher path costs and sweeps
the caches as that path does, and then `chorusAllReduce` on t's memory. No backend can make a torch call cheaper
than that sum, less what a ctypes call and its loop cost over a C++ caller (about 1 us: `--c-only` leaves the fake
call out, to compare with all_reduce_perf). Float32 sum, in place, us per call (median of 5 timed blocks after a
warm-up block), printed by rank 0 as "bytes us". torch 2.x only (the fake backend). In the trixie root:

  scripts/torch2.sh run 'build-trixie/scripts/chorusrun -n 2 --no-prefix python3 bench/torch_bound.py [--c-only]
      [--lib build-trixie/libchorus.so.0] [BYTES ...]'

docs/torch-results.md ("Sixth step") compares it with the same call through the "chorus" backend.
"""
import argparse
import statistics
import time

import torch
import torch.distributed as dist

from chorus_ctypes import CHORUS_FLOAT32, CHORUS_SUM, open_comm


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--c-only", action="store_true", help="the C call alone, without torch's path before it")
    p.add_argument("--lib", default="build-trixie/libchorus.so.0")
    p.add_argument("sizes", nargs="*", type=int, default=[64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20])
    args = p.parse_args()
    torch.set_num_threads(1)
    lib, comm, rank, world = open_comm(args.lib)
    from torch.testing._internal.distributed.fake_pg import FakeStore  # registers "fake"
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
    for size in args.sizes:
        t = torch.zeros(size // 4)  # zeros, as all_reduce_perf times with
        ptr, n = t.data_ptr(), t.numel()

        def chorus():
            if lib.chorusAllReduce(ptr, ptr, n, CHORUS_FLOAT32, CHORUS_SUM, comm, None) != 0:
                raise SystemExit("chorusAllReduce failed")

        iters = max(20, min(10000, int(0.2 / (size / 4e9 + 5e-6))))
        blocks = []
        for block in range(6):  # the first warms up
            chorus()  # both ranks start the block together
            start = time.perf_counter()
            if args.c_only:
                for _ in range(iters):
                    chorus()
            else:
                for _ in range(iters):
                    dist.all_reduce(t)
                    chorus()
            if block > 0:
                blocks.append((time.perf_counter() - start) / iters * 1e6)
        if rank == 0:
            print(f"{size} {statistics.median(blocks):.1f}", flush=True)
    dist.destroy_process_group()
    lib.chorusCommDestroy(comm)


if __name__ == "__main__":
    main()
