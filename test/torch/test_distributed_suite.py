"""A slice of torch's own DistributedTest, run over "gloo" and over "chorus" (test/torch/torch_suite.py): every
test of the slice (exact names) that passes with gloo must pass with chorus. The whole suite is run the same way for
docs/torch-results.md (CHORUS_SUITE_TESTS="" runs everything: about 20 minutes per backend here)."""
import json
import os
import subprocess
import sys
import tempfile

SLICE = os.environ.get("CHORUS_SUITE_TESTS", " ".join([
    "test_all_reduce_sum", "test_all_reduce_sum_async", "test_all_reduce_group_max", "test_all_reduce_coalesced_sum",
    "test_broadcast_group", "test_reduce_sum", "test_all_gather_group", "test_all_to_all_single_equal_split",
    "test_barrier_group", "test_send_recv", "test_isend", "test_scatter", "test_gather", "test_new_subgroups",
    "test_DistributedDataParallel_requires_grad",
]))
SUITE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_suite.py")


def run(backend, world, out):
    env = dict(os.environ, BACKEND=backend, WORLD_SIZE=str(world), CHORUS_SUITE_TESTS=SLICE, CHORUS_SUITE_JSON=out)
    done = subprocess.run([sys.executable, SUITE], env=env, capture_output=True, text=True, timeout=1200)
    print(done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-2000:])
    with open(out) as f:
        return json.load(f)


def test_what_passes_with_gloo_passes_with_chorus():
    with tempfile.TemporaryDirectory() as d:
        ref, ours = (run(b, 2, os.path.join(d, b + ".json")) for b in ("gloo", "chorus"))
        report = subprocess.run([sys.executable, SUITE, "--compare", os.path.join(d, "gloo.json"),
                                 os.path.join(d, "chorus.json")], capture_output=True, text=True)
    print(report.stdout)
    assert ref["passed"] > 0, "gloo passed nothing: the slice did not run"
    worse = [n for n, o in ref["tests"].items() if o["outcome"] == "passed" and ours["tests"][n]["outcome"] == "failed"]
    assert not worse, report.stdout
