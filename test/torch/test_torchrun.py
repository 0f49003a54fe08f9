"""The README's launch: ddp/torch/examples/train.py under torchrun (scripts/torchrun: torchrun with the faults of
Debian's torch packages worked around), 4 processes, over "chorus" and, on torch 2.x, over "cpu:chorus"."""
import os
import subprocess
import sys

import pytest
import torch

TOP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
BACKENDS = ["chorus"] + (["cpu:chorus"] if int(torch.__version__.split(".")[0]) >= 2 else [])


@pytest.mark.parametrize("backend", BACKENDS)
def test_torchrun_trains_with_replicas_in_agreement(backend):
    done = subprocess.run([sys.executable, os.path.join(TOP, "scripts", "torchrun"), "--nproc_per_node", "4",
                           os.path.join(TOP, "ddp", "torch", "examples", "train.py"), backend],
                          capture_output=True, text=True, timeout=300, env=dict(os.environ, CHORUS_SOCKET_IFNAME="=lo"))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert f"4 ranks over {backend}: replicas agree" in done.stdout, done.stdout[-2000:]
