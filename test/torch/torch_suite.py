"""torch's own DistributedTest (torch.testing._internal.distributed.distributed_test) over one backend, with the
results of every test written as JSON, and a side-by-side comparison of two such runs.

Run:      BACKEND=chorus WORLD_SIZE=2 [CHORUS_SUITE_TESTS='pattern ...'] [CHORUS_SUITE_JSON=out.json] \\
              python3 test/torch/torch_suite.py
Compare:  python3 test/torch/torch_suite.py --compare gloo.json chorus.json
Ungated:  CHORUS_SUITE_UNGATE=1 (with the run's variables): the tests torch gates by backend name decide as for gloo

The patterns are test names, or prefixes ending in "*" (all tests without any). torch's suite chooses what to run per backend by
name: "chorus" is added to the features it has (a plugin, DDP, subgroups); the tests written for gloo or nccl by name
skip themselves for any other backend, which the comparison lists with their reasons. Every rank is a process that
torch spawns; they re-import this file, so it defines the test class at import and takes its settings from the
environment (torch's own command-line parser reads sys.argv).
"""
import json
import os
import sys
import tempfile
import time
import unittest

COMPARE = len(sys.argv) > 1 and sys.argv[1] == "--compare"

if not COMPARE:
    try:
        import expecttest  # noqa: F401
    except ImportError:  # Debian 12 has no python3-expecttest
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "stand_in"))
    os.environ.setdefault("TEMP_DIR", tempfile.mkdtemp(prefix="chorus-suite-"))
    os.environ.setdefault("CHORUS_SOCKET_IFNAME", "=lo")
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    import chorus_torch  # noqa: F401  (registers "chorus")
    from torch.testing._internal.common_distributed import DistTestCases

    for feature in ("plugin", "ddp", "subgroup"):
        DistTestCases.backend_feature[feature].add("chorus")
    # CHORUS_SUITE_UNGATE=1: torch's gates by backend name (evaluated at import) decide as for gloo, and the tests
    # then run over BACKEND, to see which of the gloo-only tests chorus would pass.
    backend = os.environ["BACKEND"]
    if os.environ.get("CHORUS_SUITE_UNGATE") == "1":
        os.environ["BACKEND"] = "gloo"
    from torch.testing._internal.distributed import distributed_test
    from torch.testing._internal.distributed.distributed_test import DistributedTest, TestDistBackend
    os.environ["BACKEND"] = distributed_test.BACKEND = backend

    class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
        def setUp(self):
            super().setUp()
            self._spawn_processes()


class Recorder(unittest.TextTestResult):
    """Every test's outcome, its time and (for a skip or failure) the reason, by test name."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.outcomes = {}
        self._t0 = 0.0

    def startTest(self, test):
        self._t0 = time.monotonic()
        super().startTest(test)

    def _put(self, test, outcome, why=""):
        self.outcomes[test._testMethodName] = {"outcome": outcome, "why": why.strip().splitlines()[-1][:300] if why
                                               else "", "s": round(time.monotonic() - self._t0, 2)}

    def addSuccess(self, test):
        super().addSuccess(test)
        self._put(test, "passed")

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._put(test, "skipped", reason)

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._put(test, "failed", self._exc_info_to_string(err, test))

    def addError(self, test, err):
        super().addError(test, err)
        self._put(test, "failed", self._exc_info_to_string(err, test))

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._put(test, "passed", "expected failure")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._put(test, "failed", "unexpected success")


def run():
    patterns = os.environ.get("CHORUS_SUITE_TESTS", "").split()
    loader = unittest.TestLoader()
    names = [n for n in loader.getTestCaseNames(TestDistBackendWithSpawn)
             if not patterns or any(n == p or (p.endswith("*") and n.startswith(p[:-1])) for p in patterns)]
    suite = unittest.TestSuite(TestDistBackendWithSpawn(n) for n in names)
    t0 = time.monotonic()
    result = unittest.TextTestRunner(resultclass=Recorder, verbosity=1, stream=sys.stderr).run(suite)
    counts = {k: sum(o["outcome"] == k for o in result.outcomes.values()) for k in ("passed", "failed", "skipped")}
    summary = {"backend": os.environ["BACKEND"], "world_size": int(os.environ["WORLD_SIZE"]),
               "seconds": round(time.monotonic() - t0), **counts, "tests": result.outcomes}
    out = os.environ.get("CHORUS_SUITE_JSON")
    if out:
        with open(out, "w") as f:
            json.dump(summary, f, indent=1, sort_keys=True)
    print(f"{summary['backend']} world {summary['world_size']}: {len(result.outcomes)} ran, {counts['passed']} passed, "
          f"{counts['failed']} failed, {counts['skipped']} skipped in {summary['seconds']} s")
    return 0 if counts["failed"] == 0 else 1


def compare(reference_path, candidate_path):
    """Side-by-side counts, then every test the reference passes and the candidate does not. Exit 1 if one failed."""
    ref, cand = (json.load(open(p)) for p in (reference_path, candidate_path))
    print(f"| backend | world | ran | passed | failed | skipped | time |\n|---|---|---|---|---|---|---|")
    for r in (ref, cand):
        print(f"| {r['backend']} | {r['world_size']} | {len(r['tests'])} | {r['passed']} | {r['failed']} | "
              f"{r['skipped']} | {r['seconds']} s |")
    worse = {n: cand["tests"].get(n, {"outcome": "not run", "why": ""}) for n, o in ref["tests"].items()
             if o["outcome"] == "passed" and cand["tests"].get(n, {}).get("outcome") != "passed"}
    only = [n for n, o in cand["tests"].items() if o["outcome"] == "passed" and
            ref["tests"].get(n, {}).get("outcome") != "passed"]
    print(f"\n{len(worse)} tests pass with {ref['backend']} and not with {cand['backend']}; {len(only)} pass only "
          f"with {cand['backend']}.")
    for n, o in sorted(worse.items()):
        print(f"- {n}: {o['outcome']}: {o['why']}")
    return 1 if any(o["outcome"] == "failed" for o in worse.values()) else 0


if __name__ == "__main__":
    sys.exit(compare(sys.argv[2], sys.argv[3]) if COMPARE else run())
