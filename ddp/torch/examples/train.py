"""The smallest DistributedDataParallel training over "chorus", as a new user writes it:

    torchrun --nproc-per-node 4 ddp/torch/examples/train.py            # init_process_group("chorus")
    torchrun --nproc-per-node 4 ddp/torch/examples/train.py cpu:chorus # torch 2.x: Chorus for the CPU's tensors
                                                                       # ("cpu:chorus,cuda:nccl" beside NCCL)

with chorus_torch importable (PYTHONPATH=build/ddp/torch, or installed by meson install). Every rank trains on its
own slice of one batch; rank 0 prints the loss, and all ranks check that their parameters agree.
"""
import sys

import torch
import torch.distributed as dist

import chorus_torch  # noqa: F401  (registers "chorus")


def main():
    backend = sys.argv[1] if len(sys.argv) > 1 else "chorus"
    dist.init_process_group(backend)  # torchrun's environment: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(64 * world, 32, generator=g), torch.randn(64 * world, 1, generator=g)
    mine = slice(64 * rank, 64 * (rank + 1))
    for step in range(20):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x[mine]), y[mine])
        loss.backward()
        opt.step()
        if rank == 0 and step % 5 == 4:
            print(f"step {step + 1}: loss {loss.item():.4f}", flush=True)
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    copies = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(copies, flat)
    assert all(torch.equal(copies[0], c) for c in copies), "replicas differ"
    if rank == 0:
        print(f"{world} ranks over {dist.get_backend()}: replicas agree", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
