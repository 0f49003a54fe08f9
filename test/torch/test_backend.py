"""torch.distributed over "chorus" (ddp/torch), checked against "gloo" on the same inputs in the same processes.

Each case spawns 2 or 4 processes (file:// init); every rank makes a "chorus" default group and a "gloo" group,
runs the operation on both with the same inputs, and compares: exactly for integers, within float tolerance
otherwise. Inputs are a function of (rank, element), so each rank also knows every other rank's input.
Run with Debian's python3 and PYTHONPATH=<build>/ddp/torch.
"""
import faulthandler
import os
import tempfile
import threading
import time
import traceback

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import chorus_torch  # noqa: F401  (registers the backend)

DTYPES = [torch.int8, torch.uint8, torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.float32,
          torch.float64, torch.bool]
OPS = {"SUM": dist.ReduceOp.SUM, "PRODUCT": dist.ReduceOp.PRODUCT, "MIN": dist.ReduceOp.MIN,
       "MAX": dist.ReduceOp.MAX, "AVG": dist.ReduceOp.AVG}
COUNTS = [1, 7, 1031]


def inputs(rank, n, dtype, op="SUM"):
    """Deterministic per (rank, element); small enough that PRODUCT over 4 ranks stays exact in every type."""
    i = torch.arange(n, dtype=torch.int64)
    if dtype == torch.bool:
        return ((i + rank) % 3 != 0)
    if op == "PRODUCT":
        v = 1 + (i + rank) % 2
    else:
        v = (i * 7 + rank * 3) % 11 - (0 if dtype == torch.uint8 else 5)
    return v.to(dtype)


def close(a, b, dtype):
    if dtype.is_floating_point:
        tol = 2e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-5
        return torch.allclose(a.double(), b.double(), rtol=tol, atol=tol)
    return torch.equal(a, b)


def gloo_can(dtype, op):
    # gloo in torch 1.13 takes no bfloat16 and no bool; AVG is not one of its ops.
    return dtype not in (torch.bfloat16, torch.bool) and op != "AVG"


def reference(n, world, dtype, op):
    """The reduction of every rank's input, computed here in float64/int64."""
    xs = [inputs(r, n, dtype, op) for r in range(world)]
    if dtype == torch.bool:
        stacked = torch.stack(xs)
        return stacked.any(0) if op in ("SUM", "MAX") else stacked.all(0)
    wide = torch.stack([x.double() if dtype.is_floating_point else x.long() for x in xs])
    out = {"SUM": lambda w: w.sum(0), "PRODUCT": lambda w: w.prod(0), "MIN": lambda w: w.min(0).values,
           "MAX": lambda w: w.max(0).values, "AVG": lambda w: w.sum(0) / world}[op](wide)
    return out.to(dtype)


# A case that has not finished by then prints every thread's stack (faulthandler) and its process exits.
HANG_S = float(os.environ.get("CHORUS_TORCH_TEST_HANG_S", "240"))


# The reference groups, never destroyed: torch 2.6 destroys a ProcessGroup's backends with the GIL held (released
# from 2.8 on: pytorch/pytorch#154976), and ProcessGroupGloo's destructor joins workers that may still need the GIL
# to drop a tensor of a finished Work, so dropping the gloo group when _entry returned hung a rank now and then (CI:
# functional-2, allreduce-2). A rank is a forked process that ends with os._exit: nothing here outlives it.
_GLOO_GROUPS = []


def _entry(rank, world, path, case, errors):
    faulthandler.dump_traceback_later(HANG_S, exit=True)
    try:
        dist.init_process_group("chorus", init_method="file://" + path, rank=rank, world_size=world)
        gloo = dist.new_group(backend="gloo")
        _GLOO_GROUPS.append(gloo)
        case(rank, world, gloo)
        dist.barrier()
        dist.destroy_process_group()
    except BaseException:  # pytest.raises' Failed too
        errors.put(f"rank {rank}: {traceback.format_exc()}")


def spawn(world, case):
    os.environ.setdefault("CHORUS_SOCKET_IFNAME", "=lo")
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    ctx = mp.get_context("fork")  # the parent has no communicator and no torch threads yet; spawn re-imports torch
    errors = ctx.SimpleQueue()
    with tempfile.TemporaryDirectory() as d:
        procs = [ctx.Process(target=_entry, args=(r, world, os.path.join(d, "init"), case, errors))
                 for r in range(world)]
        for p in procs:
            p.start()
        until = time.monotonic() + HANG_S + 10
        for p in procs:
            p.join(max(0.0, until - time.monotonic()))
            if p.is_alive():
                p.kill()
                errors.put(f"pid {p.pid} did not finish in {HANG_S:.0f} s")
            elif p.exitcode != 0:
                errors.put(f"pid {p.pid} exited with {p.exitcode} (a stack dump above if it hung)")
    found = []
    while not errors.empty():
        found.append(errors.get())
    assert not found, "\n".join(found)


# ---- the cases (module level: spawned processes import them) ----

def case_allreduce(rank, world, gloo):
    for dtype in DTYPES:
        for name, op in OPS.items():
            if name == "AVG" and not dtype.is_floating_point:
                continue
            for n in COUNTS:
                for contiguous in (True, False):
                    x = inputs(rank, n, dtype, name)
                    t = x.clone() if contiguous else torch.stack([x, x], 1)[:, 0]
                    assert n == 1 or t.is_contiguous() == contiguous  # one element is contiguous anyway
                    work = dist.all_reduce(t, op=op, async_op=True)
                    work.wait()
                    want = reference(n, world, dtype, name)
                    assert close(t, want, dtype), f"all_reduce {dtype} {name} n={n}: {t[:8]} vs {want[:8]}"
                    if gloo_can(dtype, name):
                        g = x.clone()
                        dist.all_reduce(g, op=op, group=gloo)
                        assert close(t, g, dtype), f"all_reduce {dtype} {name} n={n}: chorus {t[:8]}, gloo {g[:8]}"


def case_movement(rank, world, gloo):
    for dtype in DTYPES:
        for n in COUNTS:
            x = inputs(rank, n, dtype)
            # broadcast from every root
            for root in range(world):
                t = x.clone()
                dist.broadcast(t, src=root)
                assert torch.equal(t, inputs(root, n, dtype)), f"broadcast {dtype} n={n} root {root}"
            # all_gather (list and base), against gloo
            outs = [torch.empty_like(x) for _ in range(world)]
            dist.all_gather(outs, x)
            for r in range(world):
                assert torch.equal(outs[r], inputs(r, n, dtype)), f"all_gather {dtype} n={n} from {r}"
            flat = torch.empty(world * n, dtype=dtype)
            dist._all_gather_base(flat, x)
            assert torch.equal(flat, torch.cat([inputs(r, n, dtype) for r in range(world)])), "_all_gather_base"
            if gloo_can(dtype, "SUM"):
                g = [torch.empty_like(x) for _ in range(world)]
                dist.all_gather(g, x, group=gloo)
                assert all(torch.equal(a, b) for a, b in zip(outs, g)), "all_gather differs from gloo"
            # gather and scatter to and from rank world-1
            root = world - 1
            got = [torch.empty_like(x) for _ in range(world)] if rank == root else None
            dist.gather(x, gather_list=got, dst=root)
            if rank == root:
                assert all(torch.equal(got[r], inputs(r, n, dtype)) for r in range(world)), "gather"
            out = torch.empty_like(x)
            dist.scatter(out, scatter_list=[inputs(r + 10, n, dtype) for r in range(world)] if rank == root else None,
                         src=root)
            assert torch.equal(out, inputs(rank + 10, n, dtype)), "scatter"
            # all_to_all: equal chunks, then uneven splits
            send = torch.cat([inputs(rank * world + r, n, dtype) for r in range(world)])
            recv = torch.empty_like(send)
            dist.all_to_all_single(recv, send)
            assert torch.equal(recv, torch.cat([inputs(r * world + rank, n, dtype) for r in range(world)])), \
                "all_to_all_single"
            ins = [inputs(rank * world + r, n + r, dtype) for r in range(world)]
            outs = [torch.empty(n + rank, dtype=dtype) for _ in range(world)]
            dist.all_to_all(outs, ins)
            assert all(torch.equal(outs[r], inputs(r * world + rank, n + rank, dtype)) for r in range(world)), \
                "all_to_all"
            in_splits = [1 + r for r in range(world)]
            out_splits = [1 + rank] * world
            send = torch.cat([inputs(rank * world + r, 1 + r, dtype) for r in range(world)])
            recv = torch.empty(sum(out_splits), dtype=dtype)
            dist.all_to_all_single(recv, send, output_split_sizes=out_splits, input_split_sizes=in_splits)
            assert torch.equal(recv, torch.cat([inputs(r * world + rank, 1 + rank, dtype) for r in range(world)])), \
                "all_to_all_single with uneven splits"


def case_reductions(rank, world, gloo):
    for dtype in (torch.int32, torch.float32, torch.float16, torch.bfloat16, torch.int64):
        for name, op in OPS.items():
            if name == "AVG" and not dtype.is_floating_point:
                continue
            for n in COUNTS:
                want = reference(n, world, dtype, name)
                for root in range(world):
                    t = inputs(rank, n, dtype, name)
                    dist.reduce(t, dst=root, op=op)
                    if rank == root:
                        assert close(t, want, dtype), f"reduce {dtype} {name} n={n} root {root}"
                    else:
                        assert torch.equal(t, inputs(rank, n, dtype, name)), "reduce changed a non-root's tensor"
                # reduce_scatter: rank r gets the reduction of everyone's chunk r
                out = torch.empty(n, dtype=dtype)
                dist.reduce_scatter(out, [inputs(rank, n, dtype, name) for _ in range(world)], op=op)
                assert close(out, want, dtype), f"reduce_scatter {dtype} {name} n={n}"
                flat_out = torch.empty(n, dtype=dtype)
                dist._reduce_scatter_base(flat_out, torch.cat([inputs(rank, n, dtype, name)] * world), op=op)
                assert close(flat_out, want, dtype), f"_reduce_scatter_base {dtype} {name} n={n}"


def case_p2p_and_errors(rank, world, gloo):
    for n in COUNTS:
        x = inputs(rank, n, torch.float32)
        peer = (rank + 1) % world
        prev = (rank - 1) % world
        got = torch.empty(n)
        reqs = [dist.isend(x, peer), dist.irecv(got, prev)]
        for r in reqs:
            r.wait()
        assert torch.equal(got, inputs(prev, n, torch.float32)), "isend/irecv ring"
    # a future that DDP-style code chains on
    t = torch.ones(5) * (rank + 1)
    fut = dist.all_reduce(t, async_op=True).get_future()
    out = fut.then(lambda f: f.value()[0] * 2).wait()
    assert torch.equal(out, torch.ones(5) * sum(range(1, world + 1)) * 2), "get_future().then"
    # bad arguments raise before anything is sent, naming the problem
    with pytest.raises(RuntimeError, match="BAND needs an integer or bool tensor"):
        dist.all_reduce(torch.ones(3), op=dist.ReduceOp.BAND)
    with pytest.raises(RuntimeError, match="PREMUL_SUM needs a floating-point tensor"):
        dist.all_reduce(torch.ones(3, dtype=torch.int32), op=dist._make_nccl_premul_sum(2.0))
    with pytest.raises(RuntimeError, match="Short.*which Chorus does not"):
        dist.all_reduce(torch.ones(3, dtype=torch.int16))
    c = torch.full((3,), complex(1, rank))  # torch hands a complex SUM over as its float32 view
    dist.all_reduce(c)
    assert torch.equal(c, torch.full((3,), complex(world, sum(range(world))))), "complex64 all_reduce"
    dist.barrier()
    # a subgroup of chorus beside the default group
    sub = dist.new_group(ranks=list(range(world)), backend="chorus")
    t = torch.full((3,), float(rank))
    dist.all_reduce(t, group=sub)
    assert torch.equal(t, torch.full((3,), float(sum(range(world))))), "new_group all_reduce"
    ts = [torch.ones(2), torch.ones(3, 2).t()]  # torch takes one dtype; the second is not contiguous
    dist.all_reduce_coalesced(ts)
    assert all(torch.equal(t, torch.full_like(t, world)) for t in ts), "all_reduce_coalesced"


def case_tags_and_any_source(rank, world, gloo):
    """send/recv match by tag, recv without src takes whichever rank sends first: the same on chorus and gloo."""
    for group in (None, gloo):
        # rank 0 sends tag 1 then tag 2 to every other rank, which receives tag 2 first
        if rank == 0:
            reqs = []
            for peer in range(1, world):
                reqs += [dist.isend(inputs(peer, 5, torch.float32), peer, group=group, tag=1),
                         dist.isend(inputs(peer + 10, 1031, torch.float32), peer, group=group, tag=2)]
            for r in reqs:
                r.wait()
        else:
            second = torch.empty(1031)
            dist.recv(second, src=0, group=group, tag=2)
            # chorus takes a non-contiguous tensor (through a copy); gloo refuses one
            first = torch.empty(5, 2)[:, 0] if group is None else torch.empty(5)
            dist.recv(first, src=0, group=group, tag=1)
            assert torch.equal(second, inputs(rank + 10, 1031, torch.float32)), "tag 2 received first"
            assert torch.equal(first, inputs(rank, 5, torch.float32)), "tag 1 (non-contiguous) received second"
        # any source: every other rank sends to rank 0, which learns who sent each message
        if rank == 0:
            sources = set()
            for _ in range(world - 1):
                t = torch.empty(7, dtype=torch.int64)
                src = dist.recv(t, group=group, tag=7)
                assert torch.equal(t, inputs(src, 7, torch.int64)), f"message from {src}"
                sources.add(src)
            assert sources == set(range(1, world)), f"sources {sources}"
        else:
            dist.send(inputs(rank, 7, torch.int64), 0, group=group, tag=7)
        dist.barrier(group=group)
    # a receive waiting on rank 1 does not hold up the collectives after it, nor their futures
    got = torch.empty(3)
    pending = dist.irecv(got, src=0, tag=3) if rank == 1 else None
    t = torch.ones(4)
    fut = dist.all_reduce(t, async_op=True).get_future()
    assert torch.equal(fut.wait()[0], torch.full((4,), float(world))), "all_reduce beside a pending recv"
    if rank == 0:
        dist.send(torch.full((3,), 9.0), 1, tag=3)
    if pending is not None:
        pending.wait()
        assert torch.equal(got, torch.full((3,), 9.0)), "the pending recv"


BITWISE = {"BAND": (dist.ReduceOp.BAND, torch.bitwise_and), "BOR": (dist.ReduceOp.BOR, torch.bitwise_or),
           "BXOR": (dist.ReduceOp.BXOR, torch.bitwise_xor)}


def bits(rank, n, dtype):
    """Integers whose bits differ from rank to rank (bool: a pattern per rank)."""
    i = torch.arange(n, dtype=torch.int64)
    if dtype == torch.bool:
        return (i * 3 + rank) % 4 != 0
    return ((i * 37 + 11) ^ (rank * 0x5A + (i << (rank % 5)))).remainder(120).to(dtype)


def premul(factor):
    """torch's PREMUL_SUM op: torch 1.13 takes a tensor factor as a one-tensor list, 2.x the tensor itself."""
    if isinstance(factor, torch.Tensor) and int(torch.__version__.split(".")[0]) < 2:
        factor = [factor]
    return dist._make_nccl_premul_sum(factor)


def case_bitwise_and_premul(rank, world, gloo):
    """BAND/BOR/BXOR on integer and bool tensors, against the reduction computed here and against gloo; PREMUL_SUM
    with a scalar and with a one-element tensor (torch's _make_nccl_premul_sum), against the sum of the scaled
    inputs."""
    for dtype in (torch.int8, torch.uint8, torch.int32, torch.int64, torch.bool):
        for name, (op, fn) in BITWISE.items():
            for n in COUNTS:
                want = bits(0, n, dtype)
                for r in range(1, world):
                    want = fn(want, bits(r, n, dtype))
                t = bits(rank, n, dtype)
                dist.all_reduce(t, op=op)
                assert torch.equal(t, want), f"all_reduce {dtype} {name} n={n}: {t[:8]} vs {want[:8]}"
                root = n % world
                t = bits(rank, n, dtype)
                dist.reduce(t, dst=root, op=op)
                assert torch.equal(t, want if rank == root else bits(rank, n, dtype)), f"reduce {dtype} {name}"
                out = torch.empty(n, dtype=dtype)
                dist.reduce_scatter(out, [bits(rank + p * world, n, dtype) for p in range(world)], op=op)
                mine = bits(rank * world, n, dtype)
                for r in range(1, world):
                    mine = fn(mine, bits(r + rank * world, n, dtype))
                assert torch.equal(out, mine), f"reduce_scatter {dtype} {name} n={n}"
                if dtype != torch.bool:  # gloo in torch 1.13 takes no bool
                    g = bits(rank, n, dtype)
                    dist.all_reduce(g, op=op, group=gloo)
                    assert torch.equal(g, want), f"gloo {dtype} {name}"
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        for factor in (0.25, torch.tensor([0.5], dtype=dtype)):
            f = float(factor) if isinstance(factor, float) else float(factor[0])
            for n in COUNTS:
                want = sum(inputs(r, n, torch.float64) * f for r in range(world)).to(dtype)
                t = inputs(rank, n, dtype)
                dist.all_reduce(t, op=premul(factor))
                assert close(t, want, dtype), f"all_reduce PREMUL_SUM({factor}) {dtype} n={n}: {t[:6]} {want[:6]}"
                if dtype == torch.float64:  # scaling by a power of two and summing small integers is exact
                    assert torch.equal(t, want), f"all_reduce PREMUL_SUM {dtype}: not exact"
                out = torch.empty(n, dtype=dtype)
                dist.reduce_scatter(out, [inputs(rank, n, dtype)] * world, op=premul(factor))
                assert close(out, want, dtype), f"reduce_scatter PREMUL_SUM({factor}) {dtype} n={n}"


def case_uneven(rank, world, gloo):
    """all_gather and reduce_scatter with tensors of a different size on each rank (chorusAllGatherV,
    chorusReduceScatterV), sizes 0 included, in every dtype; gather and scatter of empty tensors."""
    for dtype in DTYPES:
        for base in (0, 1, 1031):
            size = [base + (3 * r) % 4 for r in range(world)]  # ranks 0 and 4k give `base` (maybe 0)
            x = inputs(rank, size[rank], dtype)
            outs = [torch.full((size[r],), 7, dtype=dtype) for r in range(world)]
            dist.all_gather(outs, x)
            for r in range(world):
                assert torch.equal(outs[r], inputs(r, size[r], dtype)), f"uneven all_gather {dtype} {size} from {r}"
            if dtype == torch.bool:
                continue
            ops = ["SUM", "MAX"] + (["AVG"] if dtype.is_floating_point else [])
            for name in ops:
                ins = [inputs(rank, size[p], dtype, name) for p in range(world)]
                out = torch.empty(size[rank], dtype=dtype)
                dist.reduce_scatter(out, ins, op=OPS[name])
                want = reference(size[rank], world, dtype, name)
                assert close(out, want, dtype), f"uneven reduce_scatter {dtype} {name} {size}: {out[:6]} {want[:6]}"
    # empty tensors through gather and scatter
    root = world - 1
    got = [torch.empty(0) for _ in range(world)] if rank == root else None
    dist.gather(torch.empty(0), gather_list=got, dst=root)
    out = torch.empty(0)
    dist.scatter(out, scatter_list=[torch.empty(0)] * world if rank == root else None, src=root)


@pytest.mark.parametrize("world", [2, 3, 4])
@pytest.mark.parametrize("case", [case_bitwise_and_premul, case_uneven], ids=["bitwise_premul", "uneven"])
def test_ops_of_the_c_api(world, case):
    spawn(world, case)


def threads():
    return len(os.listdir("/proc/self/task"))


def case_destroy(rank, world, gloo):
    """destroy_process_group ends a group's communicator at once, its threads with it (Note [Teardown] in
    ddp/torch/backend.cc); a group made and destroyed again and again leaves nothing behind."""
    before = threads()
    for round in range(3):
        g = dist.new_group(backend="chorus")
        t = torch.ones(5)
        dist.all_reduce(t, group=g)
        assert torch.equal(t, torch.full((5,), float(world)))
        during = threads()
        dist.destroy_process_group(g)
        del g
        after = threads()
        assert during > before and after == before, \
            f"round {round}: {before} threads before the group, {during} with it, {after} after destroying it"


def test_destroy_ends_the_communicator():
    spawn(2, case_destroy)


def case_callbacks(rank, world, gloo):
    """A Future's callbacks never run on the thread that took it, though that thread is preempted between
    get_future() and then() (Note [Callback order] in ddp/torch/work.cc); the all_reduce a callback issues (as
    PowerSGD's do) completes on every rank; a Future waited for, directly or through wait_all, or polled with
    done(), completes."""
    me = threading.get_ident()
    for spin_s in (0.0, 0.03):
        ran_on = []

        def twice_reduced(f):
            ran_on.append(threading.get_ident())
            u = f.value()[0] * (rank + 1)
            dist.all_reduce(u)
            return u

        fut = dist.all_reduce(torch.ones(4), async_op=True).get_future()
        until = time.monotonic() + spin_s  # pure Python: the callback thread's wait for the GIL preempts it
        while time.monotonic() < until:
            pass
        out = fut.then(twice_reduced).wait()
        assert ran_on and ran_on[0] != me, f"spin {spin_s} s: the callback ran on the thread that took the Future"
        assert torch.equal(out, torch.full((4,), float(world * sum(range(1, world + 1))))), f"spin {spin_s} s"
    # A frame waiting for its Future is seen blocked on it at once, not after FutureTaker::kBlocked (50 ms): the
    # fastest of five (load only slows the others) shows which.
    waits = []
    for _ in range(5):
        start = time.monotonic()
        got = dist.all_reduce(torch.ones(3), async_op=True).get_future().wait()
        waits.append(time.monotonic() - start)
        assert torch.equal(got[0], torch.full((3,), float(world)))
    assert min(waits) < 0.04, f"get_future().wait() took {min(waits) * 1e3:.0f} ms at best"
    got = torch.futures.wait_all([dist.all_reduce(torch.ones(2), async_op=True).get_future()])
    assert torch.equal(got[0][0], torch.full((2,), float(world))), "wait_all"
    fut = dist.all_reduce(torch.ones(2), async_op=True).get_future()
    while not fut.done():
        time.sleep(0.001)
    assert torch.equal(fut.value()[0], torch.full((2,), float(world))), "polled with done()"


@pytest.mark.parametrize("world", [2, 3])
def test_future_callbacks_run_off_the_issuing_thread(world):
    spawn(world, case_callbacks)


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("case", [case_allreduce, case_movement, case_reductions, case_p2p_and_errors,
                                  case_tags_and_any_source],
                         ids=["allreduce", "movement", "reductions", "p2p_futures_errors_groups", "tags_any_source"])
def test_against_gloo(world, case):
    spawn(world, case)


# ---- PyTorch's own DistributedDataParallel over "chorus" ----

def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def _batch(world):
    g = torch.Generator().manual_seed(1)
    return torch.randn(8 * world, 16, generator=g), torch.randn(8 * world, 4, generator=g)


def _train(model, x, y, steps=3):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def case_ddp(rank, world, gloo):
    x, y = _batch(world)
    mine = slice(rank * 8, (rank + 1) * 8)
    alone = _train(_model(), x, y)  # one process on the whole batch
    results = {}
    for name, group in (("chorus", None), ("gloo", gloo)):
        ddp = torch.nn.parallel.DistributedDataParallel(_model(), process_group=group, bucket_cap_mb=0.001)
        results[name] = _train(ddp, x[mine], y[mine])
    for a, b, c in zip(results["chorus"], results["gloo"], alone):
        assert torch.allclose(a, b, rtol=1e-6, atol=1e-7), "DDP over chorus differs from DDP over gloo"
        assert torch.allclose(a, c, rtol=1e-5, atol=1e-6), "DDP over chorus differs from one process"


@pytest.mark.parametrize("world", [2, 4])
def test_pytorch_ddp_trains_as_gloo_and_one_process(world):
    spawn(world, case_ddp)
