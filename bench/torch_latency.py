"""Latency of a blocking torch.distributed all_reduce over "chorus" alone: N processes, a float32 tensor of BYTES,
ITERS calls timed 5 times after a barrier; prints rank 0's median microseconds per call. GLOO=1 also creates a
gloo group (as bench/torch_allreduce.py's processes hold both). Without chorus_torch on the path, set
PYTHONPATH=build/ddp/torch.

usage: /usr/bin/python3 bench/torch_latency.py N BYTES ITERS GLOO      (CHORUS_SHM_DISABLE=1 for TCP)
"""
import os, sys, time, statistics, tempfile
import torch, torch.distributed as dist, torch.multiprocessing as mp
import chorus_torch
def rank_main(rank, world, path, q, nbytes, iters, gloo):
    dist.init_process_group("chorus", init_method="file://"+path, rank=rank, world_size=world)
    if gloo: dist.new_group(backend="gloo")
    t=torch.ones(max(nbytes//4,1))
    ts=[]
    for r in range(5):
        dist.barrier()
        s=time.perf_counter()
        for _ in range(iters): dist.all_reduce(t)
        ts.append((time.perf_counter()-s)/iters*1e6)
    if rank==0: q.put(statistics.median(ts))
    dist.destroy_process_group()
if __name__=="__main__":
    n=int(sys.argv[1]); nbytes=int(sys.argv[2]); iters=int(sys.argv[3]); gloo=int(sys.argv[4])
    os.environ.setdefault("CHORUS_SOCKET_IFNAME","=lo"); os.environ.setdefault("GLOO_SOCKET_IFNAME","lo")
    ctx=mp.get_context("fork"); q=ctx.SimpleQueue()
    with tempfile.TemporaryDirectory() as d:
        ps=[ctx.Process(target=rank_main,args=(r,n,d+"/init",q,nbytes,iters,gloo)) for r in range(n)]
        [p.start() for p in ps]; print(q.get()); [p.join() for p in ps]
