#!/usr/bin/python3
"""What one blocking dist.all_reduce costs when no other rank takes part: the floor under every torch timing.

One process. torch's own "fake" backend (torch.testing's FakeProcessGroup: does nothing and returns a finished
Work) gives torch's Python and dispatcher path alone; "chorus" and "gloo" with one rank add what each backend
spends per call before any data moves. Medians of --rounds interleaved rounds. torch 2.x only (the fake backend).
--sweep BYTES: each call is followed by a copy of BYTES between two other tensors, standing in for the data a
real all_reduce of that size streams through the core's caches; the copy's own time (a loop of copies alone,
interleaved) is subtracted, so what remains is the call's cost when it starts from caches the data has swept.
in the trixie root: scripts/torch2.sh run 'PYTHONPATH=/src/build-trixie/ddp/torch python3 bench/torch_call_floor.py'
"""
import argparse
import os
import statistics
import tempfile
import time

import torch
import torch.distributed as dist

import chorus_torch  # noqa: F401  (registers the backend)


def per_call_us(group, numel, calls, sweep=None):
    t = torch.ones(numel)
    for _ in range(calls // 10):
        dist.all_reduce(t, group=group)
    start = time.perf_counter()
    if sweep is None:
        for _ in range(calls):
            dist.all_reduce(t, group=group)
    else:
        src, dst = sweep
        for _ in range(calls):
            dist.all_reduce(t, group=group)
            dst.copy_(src)
    return (time.perf_counter() - start) / calls * 1e6


def sweep_us(sweep, calls):
    src, dst = sweep
    start = time.perf_counter()
    for _ in range(calls):
        dst.copy_(src)
    return (time.perf_counter() - start) / calls * 1e6


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=4000)
    p.add_argument("--sweep", type=int, default=0, metavar="BYTES")
    args = p.parse_args()
    torch.set_num_threads(1)  # one core per rank, as in the two-process runs; a copy_ must not fan out
    sweep = (torch.ones(args.sweep // 4), torch.empty(args.sweep // 4)) if args.sweep else None

    def timed(group, b):
        if sweep is None:
            return per_call_us(group, b // 4, args.calls)
        return per_call_us(group, b // 4, args.calls, sweep) - sweep_us(sweep, args.calls)

    from torch.testing._internal.distributed.fake_pg import FakeStore  # registers "fake"
    os.environ.setdefault("CHORUS_SOCKET_IFNAME", "=lo")
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    sizes = (8, 65536)
    times = {}
    with tempfile.TemporaryDirectory() as d:
        dist.init_process_group("chorus", init_method=f"file://{d}/init", rank=0, world_size=1)
        gloo = dist.new_group(backend="gloo")
        for _ in range(args.rounds):
            for name, group in (("chorus, 1 rank", None), ("gloo, 1 rank", gloo)):
                for b in sizes:
                    times.setdefault((name, b), []).append(timed(group, b))
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    for _ in range(args.rounds):
        for b in sizes:
            times.setdefault(("torch's fake backend (no work)", b), []).append(timed(None, b))
    dist.destroy_process_group()
    after = f", each after a {args.sweep}-byte copy" if args.sweep else ""
    print(f"# torch {torch.__version__}: us per blocking dist.all_reduce{after}, median of {args.rounds} rounds")
    print("| backend | bytes | us per call |")
    print("|---|---:|---:|")
    for (name, b), v in times.items():
        print(f"| {name} | {b} | {statistics.median(v):.1f} |")


if __name__ == "__main__":
    main()
