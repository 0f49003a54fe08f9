#!/usr/bin/python3
"""torch.distributed.all_reduce through "chorus" against "gloo", side by side in the same processes.

Every rank makes a "chorus" default group and a "gloo" group; at each size the two alternate (chorus first in odd
rounds, gloo first in even ones), float32 SUM, blocking calls (or async_op=True and wait, with --async); prints an
nccl-tests-like table of the medians over rounds: time per call in us and busbw (algbw * 2(n-1)/n) in GB/s.
With --c-bench BUILD, Chorus's own C benchmark (BUILD/bench/all_reduce_perf under BUILD/scripts/chorusrun, in
place, -z 1 blocking or -z 0 on a stream with --async) runs the same sizes in the same invocation, each round
right after the torch round, and the table adds its time and how much of its speed survives through torch.

usage: PYTHONPATH=build/ddp/torch /usr/bin/python3 bench/torch_allreduce.py [-n 2] [-b 8] [-e 256M] [-f 4]
       [--rounds 3] [--async] [--c-bench build]    (CHORUS_SHM_DISABLE=1 for TCP)
Simulated hosts: scripts/netns-cluster -k 2 [-r 2] --rate 1gbit -- env PYTHONPATH=build/ddp/torch \
       /usr/bin/python3 bench/torch_allreduce.py [...]   (one process per rank, from RANK, WORLD_SIZE and
       CLUSTER_DIR; every round in one launch, without --c-bench)
"""
import argparse
import os
import statistics
import subprocess
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


def measured(t, group, async_op, budget=0.2):
    """Seconds per call over about `budget` seconds of calls (5 to 2000 of them) after a warm-up that estimates the
    call's time; every rank computes the same count (rank 0's estimate, broadcast)."""
    est = torch.tensor([timed(t, group, 3, async_op)], dtype=torch.float64)
    dist.broadcast(est, 0, group=group)
    return timed(t, group, max(5, min(2000, int(budget / max(est.item(), 1e-7)))), async_op)


def rank_main(rank, world, path, args, out, rounds, first):
    dist.init_process_group("chorus", init_method="file://" + path, rank=rank, world_size=world)
    groups = {"chorus": None, "gloo": dist.new_group(backend="gloo")}
    size = args.begin
    rows = []
    while size <= args.end:
        t = torch.ones(max(size // 4, 1))
        times = {"chorus": [], "gloo": []}
        for r in range(first, first + rounds):
            order = ["chorus", "gloo"] if r % 2 == 0 else ["gloo", "chorus"]
            for name in order:
                times[name].append(measured(t, groups[name], args.async_op))
        rows.append((t.numel() * 4, {k: statistics.median(v) for k, v in times.items()}))
        size *= args.factor
    if rank == 0:
        out.put(rows)
    dist.destroy_process_group()


class Rows:
    """The queue rank_main reports to, in a netns-cluster rank (no other process reads it)."""
    def put(self, rows):
        self.rows = rows


def c_bench(args):
    """Per size, Chorus's C all_reduce_perf time in us (in place), one adaptive run over all sizes."""
    cmd = [os.path.join(args.c_bench, "scripts", "chorusrun"), "-n", str(args.n), "--no-prefix",
           os.path.join(args.c_bench, "bench", "all_reduce_perf"), "-b", str(args.begin), "-e", str(args.end),
           "-f", str(args.factor), "-a", "1", "-T", "0.3", "-c", "0", "-z", "0" if args.async_op else "1"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    times = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) == 13 and f[0].isdigit():
            times[int(f[0])] = float(f[9])  # the in-place time column
    return times


def main():
    p = argparse.ArgumentParser()
    p.add_argument("-n", type=int, default=2)
    p.add_argument("-b", dest="begin", type=size_arg, default=8)
    p.add_argument("-e", dest="end", type=size_arg, default=256 << 20)
    p.add_argument("-f", dest="factor", type=int, default=4)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--async", dest="async_op", action="store_true")
    p.add_argument("--c-bench", metavar="BUILD", help="also run BUILD's C all_reduce_perf, interleaved by round")
    args = p.parse_args()
    if "CLUSTER_DIR" in os.environ:  # one process per rank, started by netns-cluster
        if args.c_bench:
            raise SystemExit("--c-bench runs on one host only")
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "eth0")
        rank, args.n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        out = Rows()
        rank_main(rank, args.n, os.path.join(os.environ["CLUSTER_DIR"], "allreduce-init"), args, out, args.rounds, 0)
        if rank == 0:
            report(args, [out.rows], [], "simulated hosts (netns-cluster)")
        return
    os.environ.setdefault("CHORUS_SOCKET_IFNAME", "=lo")
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    ctx = mp.get_context("fork")
    # With the C benchmark, each round is a launch of its own (torch's round, then C's); else one launch runs
    # every round.
    launches, per_launch = (args.rounds, 1) if args.c_bench else (1, args.rounds)
    rounds = []
    c_times = []
    for launch in range(launches):
        out = ctx.SimpleQueue()
        with tempfile.TemporaryDirectory() as d:
            procs = [ctx.Process(target=rank_main,
                                 args=(r, args.n, os.path.join(d, "init"), args, out, per_launch, launch))
                     for r in range(args.n)]
            for pr in procs:
                pr.start()
            rounds.append(out.get())
            for pr in procs:
                pr.join()
        if args.c_bench:
            c_times.append(c_bench(args))
    report(args, rounds, c_times, "one host")


def report(args, rounds, c_times, where):
    bus = 2 * (args.n - 1) / args.n
    print(f"# torch.distributed all_reduce float32 sum, {args.n} processes on {where}, "
          f"{'async_op + wait' if args.async_op else 'blocking'}, median of {args.rounds} interleaved rounds")
    head = "| bytes | chorus us | chorus busbw GB/s | gloo us | gloo busbw GB/s | gloo time / chorus time |"
    if args.c_bench:
        head += f" C {'-z 0' if args.async_op else '-z 1'} us | C time / torch-chorus time |"
    print(head)
    print("|---" * (head.count("|") - 1) + "|")
    for i, (nbytes, _) in enumerate(rounds[0]):
        t = {k: statistics.median(r[i][1][k] for r in rounds) for k in ("chorus", "gloo")}
        bw = {k: nbytes / v / 1e9 * bus for k, v in t.items()}
        line = (f"| {nbytes} | {t['chorus'] * 1e6:.1f} | {bw['chorus']:.2f} | {t['gloo'] * 1e6:.1f} | {bw['gloo']:.2f} |"
                f" {t['gloo'] / t['chorus']:.2f} |")
        if args.c_bench:
            c = statistics.median(ct[nbytes] for ct in c_times if nbytes in ct)
            line += f" {c:.2f} | {c / (t['chorus'] * 1e6):.2f} |"
        print(line)


if __name__ == "__main__":
    main()
