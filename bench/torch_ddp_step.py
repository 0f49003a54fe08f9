#!/usr/bin/python3
"""PyTorch's own DistributedDataParallel step time over "chorus" against "gloo", side by side in the same processes.

Every rank makes a "chorus" default group and a "gloo" group and one DDP model over each (same initial weights);
rounds alternate which backend goes first; each round times --steps SGD steps (forward, backward with DDP's
bucketed all-reduces overlapping it, optimizer) after one warm-up step. Prints the median step time per backend and
gloo's over chorus's. A third model without DDP ("compute only": the same forward, backward and optimizer, no
communication) runs in the same rounds on every rank: no backend's step can be shorter, so gloo's step over it is
the most any backend could gain over gloo there. The model is --layers Linear(--width, --width) with ReLU: 4 x 1280
is 6.6 M parameters, 25 MiB of float32 gradients.

Local processes:  PYTHONPATH=build/ddp/torch /usr/bin/python3 bench/torch_ddp_step.py [-n 2]
Simulated hosts:  scripts/netns-cluster -k 2 --rate 1gbit -- env PYTHONPATH=build/ddp/torch \\
                      /usr/bin/python3 bench/torch_ddp_step.py
(under netns-cluster every rank is one process of its host: RANK, WORLD_SIZE and CLUSTER_DIR come from it.)
"""
import argparse
import os
import statistics
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

import chorus_torch  # noqa: F401


def model(width, layers):
    torch.manual_seed(0)
    mods = []
    for _ in range(layers):
        mods += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*mods)


def timed_steps(net, opt, x, y, steps):
    def step():
        opt.zero_grad()
        torch.nn.functional.mse_loss(net(x), y).backward()
        opt.step()
    step()  # warm-up: DDP's first backward builds its buckets
    dist.barrier()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    dist.barrier()
    return times


def rank_main(rank, world, init, args, out):
    torch.set_num_threads(args.threads)
    dist.init_process_group("chorus", init_method=init, rank=rank, world_size=world)
    gloo = dist.new_group(backend="gloo")
    nets = {}  # name -> (module, its optimizer), in the order of the first round
    for name, group in (("chorus", None), ("gloo", gloo)):
        m = model(args.width, args.layers)
        nets[name] = (DDP(m, process_group=group, bucket_cap_mb=args.bucket_mb),
                      torch.optim.SGD(m.parameters(), lr=1e-4))
    alone = model(args.width, args.layers)
    nets["compute only"] = (alone, torch.optim.SGD(alone.parameters(), lr=1e-4))
    g = torch.Generator().manual_seed(rank)
    x, y = torch.randn(args.batch, args.width, generator=g), torch.randn(args.batch, args.width, generator=g)
    results = {name: [] for name in nets}
    for r in range(args.rounds):
        for name in list(nets) if r % 2 == 0 else reversed(list(nets)):
            net, opt = nets[name]
            results[name] += timed_steps(net, opt, x, y, args.steps)
    if rank == 0:
        grads = sum(p.numel() for p in nets["chorus"][0].parameters()) * 4
        out.append((grads, {k: statistics.median(v) for k, v in results.items()}))
    dist.destroy_process_group()


def report(world, args, grads, med):
    where = os.environ.get("CLUSTER_DIR") and "simulated hosts (netns-cluster)" or "one host"
    print(f"# DDP step, {world} processes on {where}, {args.layers} x Linear({args.width}) = {grads / 2**20:.1f} MiB "
          f"of gradients, batch {args.batch}, buckets {args.bucket_mb} MiB, median of {args.rounds} x {args.steps} "
          f"interleaved steps")
    print("| backend | step ms |")
    print("|---|---|")
    for k in ("chorus", "gloo", "compute only"):
        print(f"| {k} | {med[k] * 1e3:.1f} |")
    print(f"gloo step / compute-only step: {med['gloo'] / med['compute only']:.2f} (the most any backend could gain)")
    print(f"gloo step / chorus step: {med['gloo'] / med['chorus']:.2f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=2, help="local processes (ignored under netns-cluster)")
    ap.add_argument("--width", type=int, default=1280)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--bucket-mb", type=float, default=25)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads per process")
    args = ap.parse_args()
    if "CLUSTER_DIR" in os.environ:  # one process per rank, started by netns-cluster
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "eth0")
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        out = []
        rank_main(rank, world, "file://" + os.path.join(os.environ["CLUSTER_DIR"], "ddp-init"), args, out)
        if out:
            report(world, args, *out[0])
        return
    os.environ.setdefault("CHORUS_SOCKET_IFNAME", "=lo")
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    ctx = mp.get_context("fork")
    with tempfile.TemporaryDirectory() as d, ctx.Manager() as mgr:
        out = mgr.list()
        procs = [ctx.Process(target=rank_main, args=(r, args.n, "file://" + os.path.join(d, "init"), args, out))
                 for r in range(args.n)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        if any(p.exitcode != 0 for p in procs):
            raise SystemExit("a rank failed")
        report(args.n, args, *out[0])


if __name__ == "__main__":
    main()
