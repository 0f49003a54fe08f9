#!/usr/bin/env python3
"""torch.distributed's gloo backend with CUDA tensors: allreduce(float32, SUM) busbw, 2 ranks (processes) on one GPU,
the peer scripts/gpu-check.sh sets next to all_reduce_perf -G 1. Usage: gloo_cuda.py [minbytes] [maxbytes]."""
import os
import socket
import sys
import time


def worker(rank, nranks, port, sizes, out):
    import torch
    import torch.distributed as dist

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.cuda.set_device(0)
    dist.init_process_group("gloo", rank=rank, world_size=nranks)
    for nbytes in sizes:
        t = torch.zeros(max(1, nbytes // 4), dtype=torch.float32, device="cuda")
        for _ in range(2):
            dist.all_reduce(t)
        torch.cuda.synchronize()
        iters, spent = 0, 0.0
        start = time.perf_counter()
        while iters < 3 or (spent < 1.0 and iters < 1000):  # about a second per size
            dist.all_reduce(t)
            iters += 1
            spent = time.perf_counter() - start
        torch.cuda.synchronize()
        per = torch.tensor([(time.perf_counter() - start) / iters], dtype=torch.float64)
        dist.all_reduce(per, op=dist.ReduceOp.MAX)
        if rank == 0:
            out.put((nbytes, per.item(), iters))
    dist.destroy_process_group()


def main():
    import torch.multiprocessing as mp

    lo = int(float(sys.argv[1])) if len(sys.argv) > 1 else 8
    hi = int(float(sys.argv[2])) if len(sys.argv) > 2 else 1 << 28
    sizes, s = [], lo
    while s <= hi:
        sizes.append(s)
        s *= 4
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    nranks = 2
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, nranks, port, sizes, out)) for r in range(nranks)]
    for p in procs:
        p.start()
    print("# gloo_cuda: torch.distributed gloo, CUDA tensors, allreduce float32 sum, 2 ranks on one GPU")
    print("# %12s %12s %8s %8s %6s" % ("bytes", "time(us)", "algbw", "busbw", "iters"))
    for _ in sizes:
        nbytes, sec, iters = out.get()
        algbw = nbytes / sec / 1e9
        print("  %12d %12.1f %8.2f %8.2f %6d" % (nbytes, sec * 1e6, algbw, algbw * 2 * (nranks - 1) / nranks, iters))
        sys.stdout.flush()
    for p in procs:
        p.join()
    return 0 if all(p.exitcode == 0 for p in procs) else 1


if __name__ == "__main__":
    sys.exit(main())
