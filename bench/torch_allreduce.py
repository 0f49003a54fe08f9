#!/usr/bin/python3
"""torch.distributed.all_reduce through "chorus" against "gloo", side by side in the same processes.

Every rank makes a "chorus" default group and a "gloo" group; at each size the two alternate (chorus first in odd
rounds, gloo first in even ones), float32 SUM, blocking calls (or async_op=True and wait, with --async); prints an
nccl-tests-like table of the medians over rounds: time per call in us and busbw (algbw * 2(n-1)/n) in GB/s.

usage: PYTHONPATH=build/ddp/torch /usr/bin/python3 bench/torch_allreduce.py [-n 2] [-b 8] [-e 256M] [-f 4]
       [--rounds 3] [--async]    (CHORUS_SHM_DISABLE=1 for TCP)
"""
import argparse
import os
import statistics
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import chorus_torch  # noqa: F401


def size_arg(text):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(text[:-1]) * mult[text[-1].upper()]) if text[-1].upper() in mult else int(text)


def timed(t, group, iters, async_op):
    dist.barrier(group=group)
    start = time.perf_counter()
    for _ in range(iters):
        w = dist.all_reduce(t, group=group, async_op=async_op)
        if async_op:
            w.wait()
    dist.barrier(group=group)
    return (time.perf_counter() - start) / iters


def rank_main(rank, world, path, args, out):
    dist.init_process_group("chorus", init_method="file://" + path, rank=rank, world_size=world)
    groups = {"chorus": None, "gloo": dist.new_group(backend="gloo")}
    size = args.begin
    rows = []
    while size <= args.end:
        t = torch.ones(max(size // 4, 1))
        iters = max(5, min(2000, int(2e8 // max(size, 1) // 50)))
        times = {"chorus": [], "gloo": []}
        for r in range(args.rounds):
            order = ["chorus", "gloo"] if r % 2 == 0 else ["gloo", "chorus"]
            for name in order:
                timed(t, groups[name], max(2, iters // 10), args.async_op)  # warm-up
                times[name].append(timed(t, groups[name], iters, args.async_op))
        rows.append((t.numel() * 4, {k: statistics.median(v) for k, v in times.items()}))
        size *= args.factor
    if rank == 0:
        out.put(rows)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("-n", type=int, default=2)
    p.add_argument("-b", dest="begin", type=size_arg, default=8)
    p.add_argument("-e", dest="end", type=size_arg, default=256 << 20)
    p.add_argument("-f", dest="factor", type=int, default=4)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--async", dest="async_op", action="store_true")
    args = p.parse_args()
    os.environ.setdefault("CHORUS_SOCKET_IFNAME", "=lo")
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    ctx = mp.get_context("fork")
    out = ctx.SimpleQueue()
    with tempfile.TemporaryDirectory() as d:
        procs = [ctx.Process(target=rank_main, args=(r, args.n, os.path.join(d, "init"), args, out))
                 for r in range(args.n)]
        for pr in procs:
            pr.start()
        rows = out.get()
        for pr in procs:
            pr.join()
    bus = 2 * (args.n - 1) / args.n
    print(f"# torch.distributed all_reduce float32 sum, {args.n} processes, "
          f"{'async_op + wait' if args.async_op else 'blocking'}, median of {args.rounds} interleaved rounds")
    print("| bytes | chorus us | chorus busbw GB/s | gloo us | gloo busbw GB/s | gloo time / chorus time |")
    print("|---|---|---|---|---|---|")
    for nbytes, t in rows:
        bw = {k: nbytes / v / 1e9 * bus for k, v in t.items()}
        print(f"| {nbytes} | {t['chorus'] * 1e6:.1f} | {bw['chorus']:.2f} | {t['gloo'] * 1e6:.1f} | {bw['gloo']:.2f} |"
              f" {t['gloo'] / t['chorus']:.2f} |")


if __name__ == "__main__":
    main()
