"""Faults through torch.distributed over "chorus": a killed rank (beside collectives, and beside receives waiting
for it) and mismatched calls raise, naming the ranks, within a bound; a rank that never joins a call makes it
raise after the group's timeout; nobody hangs."""
import datetime
import os
import signal
import tempfile
import time
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import chorus_torch  # noqa: F401  (registers the backend)

DEATH_DELAY = 0.5  # s after the barrier
# A failure of the backend: DistBackendError on torch 2.x (a RuntimeError), RuntimeError on 1.13, which has no such class.
FAILURE = "DistBackendError" if int(torch.__version__.split(".")[0]) >= 2 else "RuntimeError"


def described(e):
    return f"{type(e).__name__}: {e}"


def _last_rank_dies_during(work):
    """An entry where the last rank is killed after a barrier while the others run work(rank, world) until it
    raises; each survivor reports the error text and how long after the death's start it came."""
    def entry(rank, world, path, out):
        try:
            dist.init_process_group("chorus", init_method="file://" + path, rank=rank, world_size=world)
            dist.barrier()
            if rank == world - 1:
                time.sleep(DEATH_DELAY)
                os.kill(os.getpid(), signal.SIGKILL)
            start = time.monotonic()
            try:
                work(rank, world)
                out.put((rank, "no error", time.monotonic() - start))
            except RuntimeError as e:
                out.put((rank, described(e), time.monotonic() - start))
        except Exception:
            out.put((rank, "setup: " + traceback.format_exc(), -1))
        os._exit(0)  # the communicator is broken; nothing to tear down cleanly
    return entry


def _all_reduce_until_it_fails(rank, world):
    t = torch.ones(1 << 16)
    for _ in range(100000):  # until the peer's death reaches this rank
        dist.all_reduce(t, async_op=True).wait()


def _receive_from_the_dying_rank(rank, world):
    t = torch.ones(16)  # rank 0 waits for a message from the rank that dies, rank 1 for one from any rank
    dist.recv(t, src=world - 1) if rank == 0 else dist.recv(t)


_killed = _last_rank_dies_during(_all_reduce_until_it_fails)
_killed_while_receiving = _last_rank_dies_during(_receive_from_the_dying_rank)


def _mismatched(rank, world, path, out):
    try:
        dist.init_process_group("chorus", init_method="file://" + path, rank=rank, world_size=world)
        start = time.monotonic()
        try:
            dist.all_reduce(torch.ones(8 * (rank + 1)))
            out.put((rank, "no error", time.monotonic() - start))
        except RuntimeError as e:
            out.put((rank, described(e), time.monotonic() - start))
    except Exception:
        out.put((rank, "setup: " + traceback.format_exc(), -1))
    os._exit(0)


TIMEOUT_S = 2  # the group's timeout; CHORUS_TIMEOUT in the tests' environment is 120 s


def _late(rank, world, path, out):
    try:
        dist.init_process_group("chorus", init_method="file://" + path, rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=TIMEOUT_S))
        if rank == 1:
            time.sleep(3 * TIMEOUT_S)  # rank 0's call waits for it
        start = time.monotonic()
        try:
            t = torch.ones(1000)
            dist.all_reduce(t)
            right = torch.equal(t, torch.full_like(t, 2))
            out.put((rank, "no error" if right else "wrong sum", time.monotonic() - start))
        except RuntimeError as e:
            out.put((rank, described(e), time.monotonic() - start))
    except Exception:
        out.put((rank, "setup: " + traceback.format_exc(), -1))
    os._exit(0)


def run(world, entry, expect):
    os.environ.setdefault("CHORUS_SOCKET_IFNAME", "=lo")
    ctx = mp.get_context("fork")
    out = ctx.SimpleQueue()
    with tempfile.TemporaryDirectory() as d:
        procs = [ctx.Process(target=entry, args=(r, world, os.path.join(d, "init"), out)) for r in range(world)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
            if p.is_alive():
                p.kill()
    got = {}
    while not out.empty():
        rank, text, seconds = out.get()
        got[rank] = (text, seconds)
    assert sorted(got) == list(range(expect)), f"ranks that answered: {sorted(got)} (expected {expect}): {got}"
    return got


def test_a_killed_rank_makes_every_survivor_raise_within_2_s_naming_it():
    world = 3
    got = run(world, _killed, world - 1)
    for rank, (text, seconds) in got.items():
        assert "rank 2" in text and text.startswith(FAILURE) and "group '" in text, f"rank {rank}: {text}"
        assert seconds < DEATH_DELAY + 2.0, f"rank {rank} raised after {seconds:.2f} s: {text}"


def test_a_killed_rank_fails_the_receives_waiting_for_it_within_2_s():
    world = 3
    got = run(world, _killed_while_receiving, world - 1)
    for rank, (text, seconds) in got.items():
        assert "rank 2" in text, f"rank {rank}: {text}"
        assert seconds < DEATH_DELAY + 2.0, f"rank {rank} raised after {seconds:.2f} s: {text}"


def test_mismatched_shapes_raise_naming_both_ranks():
    got = run(2, _mismatched, 2)
    for rank, (text, seconds) in got.items():
        assert "mismatched" in text and "rank 0" in text and "rank 1" in text, f"rank {rank}: {text}"
        assert text.startswith(FAILURE), f"rank {rank}: {text}"
        assert seconds < 5, f"rank {rank} raised after {seconds:.2f} s"


def test_the_groups_timeout_bounds_a_call_a_peer_never_joins():
    got = run(2, _late, 2)
    text, seconds = got[0]
    assert f"made no progress for {TIMEOUT_S} s" in text and text.startswith(FAILURE), f"rank 0: {text}"
    assert TIMEOUT_S * 0.9 < seconds < TIMEOUT_S + 3, f"rank 0 raised after {seconds:.2f} s: {text}"
    # rank 0 had sent its part before it gave up: rank 1 may complete the call, but never with a wrong result
    assert got[1][0] != "wrong sum", "rank 1 completed the call with a wrong result"
