"""Processes that end with a group still alive: short scripts run again and again over "chorus" and over "gloo",
counting the runs where a process did not exit with 0.

torch 2.6 destroys process groups from libtorch's exit-time destructors, after libchorus's own had run: before
Note [Immortal statics] every process of a script that exited without destroy_process_group died with SIGSEGV in
chorusCommDestroy (10 of 10); a DDP group still held at exit aborted when a Chorus thread took the GIL during
finalization (Note [Threads at exit]). Chorus must never exit abnormally more often than gloo, and never where gloo
does not. CHORUS_EXIT_RUNS sets the runs per script and backend (docs/results: 50 each).
"""
import os
import subprocess
import sys
import tempfile

import pytest

RUNS = int(os.environ.get("CHORUS_EXIT_RUNS", "6"))
WORLD = 2

# Each script runs as `python3 -c SCRIPT BACKEND RANK STOREFILE`.
PRELUDE = """
import sys, torch, torch.distributed as dist
import chorus_torch
backend, rank, store = sys.argv[1], int(sys.argv[2]), sys.argv[3]
dist.init_process_group(backend, init_method="file://" + store, rank=rank, world_size=%d)
t = torch.ones(1024)
""" % WORLD

SCRIPTS = {
    # init, one all_reduce, exit without destroy_process_group (torch 2.6: SIGSEGV in every process before the fix)
    "no_destroy": "dist.all_reduce(t)\n",
    "destroy": "dist.all_reduce(t)\ndist.destroy_process_group()\n",
    # work left pending at exit: an all_reduce nobody waits for, a subgroup never destroyed
    "pending_work": "g = dist.new_group()\ndist.all_reduce(t, group=g)\nw = dist.all_reduce(t, async_op=True)\n",
    # a DDP module holds the group until the interpreter ends
    "ddp_alive": ("m = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 8))\n"
                  "m(torch.ones(2, 8)).sum().backward()\n"),
}


def run_once(script, backend):
    """Exit codes of the WORLD processes of one run (None: killed after the deadline)."""
    env = dict(os.environ, CHORUS_SOCKET_IFNAME="=lo", GLOO_SOCKET_IFNAME="lo")
    with tempfile.TemporaryDirectory() as d:
        store = os.path.join(d, "store")
        procs = [subprocess.Popen([sys.executable, "-c", PRELUDE + SCRIPTS[script], backend, str(r), store], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for r in range(WORLD)]
        codes = []
        for p in procs:
            try:
                _, err = p.communicate(timeout=60)
                codes.append(p.returncode)
                if p.returncode != 0:
                    sys.stderr.write(f"{script} over {backend}: exit {p.returncode}: {err.decode()[-600:]}\n")
            except subprocess.TimeoutExpired:
                p.kill()
                p.communicate()
                codes.append(None)
        return codes


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_exit_never_worse_than_gloo(script):
    abnormal = {}
    for backend in ("chorus", "gloo"):
        abnormal[backend] = sum(code != 0 for _ in range(RUNS) for code in run_once(script, backend))
    print(f"{script}: abnormal exits of {RUNS * WORLD} processes: chorus {abnormal['chorus']}, "
          f"gloo {abnormal['gloo']}")
    assert abnormal["chorus"] <= abnormal["gloo"], abnormal
    if abnormal["gloo"] == 0:
        assert abnormal["chorus"] == 0, abnormal
