#!/usr/bin/python3
"""A tensor-parallel (DTensor) MLP training step over "chorus" against "gloo", side by side in the same processes.

Every rank makes a "chorus" default group and a "gloo" group, a named 1-D DeviceMesh over each, and the same MLP
(--layers pairs of Linear(--width, 4 x --width), ReLU, Linear(4 x --width, --width)) parallelized on each mesh:
the first Linear of a pair column-wise, the second row-wise (torch's Megatron-style plan, an all_reduce of the
activations per pair forward and one per pair backward). Rounds alternate which backend goes first; each times
--steps SGD steps after a warm-up. Prints the median step time per backend and gloo's over chorus's. Needs torch 2.x.
With --cpu (local processes) it also prints, per backend, the CPU time a step takes summed over the ranks (every
thread of each process) and the context switches: where the ranks outnumber the cores, a step can take no less wall
time than that CPU time over the cores.

Local processes:  PYTHONPATH=build/ddp/torch python3 bench/torch_tp_step.py [-n 2]
Simulated hosts:  scripts/netns-cluster -k 2 --rate 1gbit -- env PYTHONPATH=... python3 bench/torch_tp_step.py
"""
import argparse
import os
import resource
import statistics
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

import chorus_torch  # noqa: F401


def mlp(width, layers):
    torch.manual_seed(0)
    mods = []
    for _ in range(layers):
        mods += [torch.nn.Linear(width, 4 * width), torch.nn.ReLU(), torch.nn.Linear(4 * width, width)]
    return torch.nn.Sequential(*mods)


def plan(layers):
    out = {}
    for i in range(layers):
        out[str(3 * i)] = ColwiseParallel()
        out[str(3 * i + 2)] = RowwiseParallel()
    return out


def timed_steps(net, opt, x, y, steps):
    def step():
        opt.zero_grad()
        torch.nn.functional.mse_loss(net(x), y).backward()
        opt.step()
    step()
    dist.barrier()
    times = []  # per step: wall s, CPU s, voluntary and involuntary context switches
    for _ in range(steps):
        before, cpu, start = resource.getrusage(resource.RUSAGE_SELF), time.process_time(), time.perf_counter()
        step()
        after = resource.getrusage(resource.RUSAGE_SELF)
        times.append((time.perf_counter() - start, time.process_time() - cpu, after.ru_nvcsw - before.ru_nvcsw,
                      after.ru_nivcsw - before.ru_nivcsw))
    dist.barrier()
    return times


def rank_main(rank, world, init, args, out):
    torch.set_num_threads(args.threads)
    dist.init_process_group("chorus", init_method=init, rank=rank, world_size=world)
    gloo = dist.new_group(backend="gloo")
    nets = {}
    meshes = {}
    for name, group in (("chorus", dist.group.WORLD), ("gloo", gloo)):
        # Note [Meshes of one process]: DeviceMesh compares equal by device type, ranks and dimension names, not by
        # group, and DTensor caches its sharding decisions by mesh. Two unnamed 1-D meshes over the same ranks are
        # one mesh to DTensor, and the collectives of the net that runs second go to the first net's group. The
        # names keep them apart; the assert below guards it.
        meshes[name] = DeviceMesh.from_group(group, "cpu", mesh_dim_names=(name,))
        m = parallelize_module(mlp(args.width, args.layers), meshes[name], plan(args.layers))
        nets[name] = (m, torch.optim.SGD(m.parameters(), lr=1e-4))
    assert meshes["chorus"] != meshes["gloo"], "DTensor takes the meshes for one (Note [Meshes of one process])"
    g = torch.Generator().manual_seed(7)  # the same batch on every rank: tensor parallelism splits the model
    x, y = torch.randn(args.batch, args.width, generator=g), torch.randn(args.batch, args.width, generator=g)
    results = {name: [] for name in nets}
    for r in range(args.rounds):
        for name in list(nets) if r % 2 == 0 else reversed(list(nets)):
            net, opt = nets[name]
            results[name] += timed_steps(net, opt, x, y, args.steps)
    # Per backend: the median of each of the four figures over this rank's steps.
    out.append((rank, {k: [statistics.median(step[i] for step in v) for i in range(4)] for k, v in results.items()}))
    dist.destroy_process_group()


def report(world, args, ranks):
    med = dict(ranks)[0]
    where = os.environ.get("CLUSTER_DIR") and "simulated hosts (netns-cluster)" or "one host"
    print(f"# tensor-parallel step, {world} processes on {where}, {args.layers} x (Linear({args.width}, "
          f"{4 * args.width}) + Linear({4 * args.width}, {args.width})), batch {args.batch}, median of {args.rounds} "
          f"x {args.steps} interleaved steps")
    print("| backend | step ms |\n|---|---|")
    for k in ("chorus", "gloo"):
        print(f"| {k} | {med[k][0] * 1e3:.1f} |")
    print(f"gloo step / chorus step: {med['gloo'][0] / med['chorus'][0]:.2f}")
    if args.cpu and len(ranks) == world:
        cores = len(os.sched_getaffinity(0))
        print(f"| backend | CPU ms per step, all {world} ranks | that over {cores} cores | voluntary / involuntary "
              "context switches per step, all ranks |\n|---|---|---|---|")
        for k in ("chorus", "gloo"):
            total = [sum(m[k][i] for _, m in ranks) for i in range(4)]
            print(f"| {k} | {total[1] * 1e3:.1f} | {total[1] * 1e3 / cores:.1f} | {total[2]:.0f} / {total[3]:.0f} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=2, help="local processes (ignored under netns-cluster)")
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads per process")
    ap.add_argument("--cpu", action="store_true", help="also CPU time and context switches per step")
    args = ap.parse_args()
    if "CLUSTER_DIR" in os.environ:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "eth0")
        out = []
        rank_main(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]),
                  "file://" + os.path.join(os.environ["CLUSTER_DIR"], "tp-init"), args, out)
        if out and out[0][0] == 0:
            report(int(os.environ["WORLD_SIZE"]), args, out)
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
        report(args.n, args, list(out))


if __name__ == "__main__":
    main()
