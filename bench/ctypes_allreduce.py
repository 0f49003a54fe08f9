#!/usr/bin/python3
"""A blocking chorusAllReduce from a plain Python loop through ctypes, no torch: us per call by size.

Separates what a Python caller costs from what torch's path costs (docs/torch-results.md, "Fourth measurement").
Float32 sum, in place, 64 KiB to 16 MiB by 4x, median of 5 rounds of about 0.2 s each; rank 0 prints
"bytes us-per-call cpu/wall" (cpu/wall: the process's CPU seconds per wall second in the last round).
--stream: each call goes on one reused stream and is followed by chorusStreamSynchronize, the path torch's
blocking all_reduce takes (a Work and its wait()).
--busy=US: spin US microseconds in Python before each call, standing in for a caller's own per-call work (torch's
dispatch costs 3.5-5 us); with two ranks the time per call should grow by US if their per-call work overlaps.
Run: build/scripts/chorusrun -n 2 --no-prefix /usr/bin/python3 bench/ctypes_allreduce.py [--stream] [--busy=US]
     [LIBCHORUS]
"""
import ctypes
import statistics
import sys
import time

import numpy as np

from chorus_ctypes import CHORUS_FLOAT32, CHORUS_SUM, open_comm


def main():
    args = sys.argv[1:]
    use_stream = "--stream" in args
    busy = next((float(a.split("=", 1)[1]) * 1e-6 for a in args if a.startswith("--busy=")), 0.0)
    args = [a for a in args if a != "--stream" and not a.startswith("--busy=")]
    lib, comm, rank, _ = open_comm(args[0] if args else "build/libchorus.so.0")
    stream = ctypes.c_void_p()
    if use_stream and lib.chorusStreamCreate(comm, ctypes.byref(stream)) != 0:
        raise SystemExit("chorusStreamCreate failed")
    sync = lib.chorusStreamSynchronize if use_stream else (lambda s: 0)
    one = np.zeros(1, dtype=np.float32)

    def barrier():
        lib.chorusAllReduce(one.ctypes.data, one.ctypes.data, 1, CHORUS_FLOAT32, CHORUS_SUM, comm, None)

    size = 64 << 10
    while size <= 16 << 20:
        a = np.zeros(size // 4, dtype=np.float32)  # zeros, as all_reduce_perf times with
        p, n = a.ctypes.data, a.size
        iters = max(5, min(2000, int(0.2 / (size / 4e9 + 5e-6))))
        rounds = []
        for _ in range(5):
            barrier()
            start, cpu = time.perf_counter(), time.process_time()
            for _ in range(iters):
                if busy:
                    until = time.perf_counter() + busy
                    while time.perf_counter() < until:
                        pass
                lib.chorusAllReduce(p, p, n, CHORUS_FLOAT32, CHORUS_SUM, comm, stream)
                sync(stream)
            barrier()
            wall = time.perf_counter() - start
            rounds.append(wall / iters * 1e6)
            cpu = (time.process_time() - cpu) / wall
        if rank == 0:
            print(f"{size} {statistics.median(rounds):.1f} cpu/wall {cpu:.2f}", flush=True)
        size *= 4
    if use_stream:
        lib.chorusStreamDestroy(stream)
    lib.chorusCommDestroy(comm)


if __name__ == "__main__":
    main()
