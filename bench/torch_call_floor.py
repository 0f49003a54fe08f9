#!/usr/bin/python3
"""What one blocking dist.all_reduce costs when no other rank takes part: the floor under every torch timing.

One process. torch's own "fake" backend (torch.testing's FakeProcessGroup: does nothing and returns a finished
Work) gives torch's Python and dispatcher path alone; "chorus" and "gloo" with one rank add what each backend
spends per call before any data moves. Medians of --rounds interleaved rounds. torch 2.x only (the fake backend);
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


def per_call_us(group, numel, calls):
    t = torch.ones(numel)
    for _ in range(calls // 10):
        dist.all_reduce(t, group=group)
    start = time.perf_counter()
    for _ in range(calls):
        dist.all_reduce(t, group=group)
    return (time.perf_counter() - start) / calls * 1e6


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=4000)
    args = p.parse_args()
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
                    times.setdefault((name, b), []).append(per_call_us(group, b // 4, args.calls))
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    for _ in range(args.rounds):
        for b in sizes:
            times.setdefault(("torch's fake backend (no work)", b), []).append(per_call_us(None, b // 4, args.calls))
    dist.destroy_process_group()
    print(f"# torch {torch.__version__}: us per blocking dist.all_reduce, median of {args.rounds} rounds")
    print("| backend | bytes | us per call |")
    print("|---|---:|---:|")
    for (name, b), v in times.items():
        print(f"| {name} | {b} | {statistics.median(v):.1f} |")


if __name__ == "__main__":
    main()
