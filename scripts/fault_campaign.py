#!/usr/bin/env python3
"""Fault-injection campaign (issue 16): runs a 4-rank workload (build/test/fault_worker: checked AllReduces) on
simulated hosts (scripts/netns-cluster, one rank per host) and injects one fault per run at a random moment, on a
random rank:

  kill      SIGKILL                        every survivor must fail within 2 s
  stop      SIGSTOP                        every other rank within CHORUS_PEER_TIMEOUT (3 here) + 2 s
  linkdown  ip link set eth0 down          every rank (the cut-off one too) within CHORUS_PEER_TIMEOUT + 2 s
  loss      iptables DROP, both ways       as linkdown
  delay     200 ms added to every packet   must NOT be declared a failure: every rank completes, right
  mismatch  the rank calls Broadcast       every rank within 2 s of the wrong call
  skip      the rank skips one AllReduce   every rank within 2 s of the skip

For each run it records whether every rank returned (one still in a call CHORUS_TIMEOUT (15 s here) + 5 s after
its bound is a hang; one that returned only by chorusTimeout is a late detection; for both scripts/chorus_hang.py
reads the flight-recorder dumps and must name the faulty rank), the errors, how long after the fault, wrong
results, and leftovers: each surviving process's file descriptors and threads after chorusCommAbort against before
chorusCommInitFromEnv, and /dev/shm entries.

Usage (root): scripts/fault_campaign.py [--injections N] [--seed S] [--kinds kill,stop,...] [--worker PATH]
Prints one line per injection and a table per kind; exits 1 on any hang, leak, wrong result or missed bound.
Exits 77 (skip) without root or ip.
"""
import argparse
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PEER_TIMEOUT = 3
BOUNDS = {"kill": 2.0, "stop": PEER_TIMEOUT + 2.0, "linkdown": PEER_TIMEOUT + 2.0, "loss": PEER_TIMEOUT + 2.0,
          "mismatch": 2.0, "skip": 2.0}
KINDS = ["kill", "stop", "linkdown", "loss", "delay", "mismatch", "skip"]
RANKS = 4


def now_ns():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def read_rank(out, r):
    try:
        with open(os.path.join(out, f"rank-{r}.txt")) as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return []


def parse(lines):
    d = {}
    for line in lines:
        word, _, rest = line.partition(" ")
        if word == "ready":
            t, fds, threads = rest.split()
            d["ready"], d["fds0"], d["threads0"] = int(t), int(fds), int(threads)
        elif word == "fault":
            d["fault"] = int(rest)
        elif word == "error":
            t, it, rc, text = (rest.split(" ", 3) + [""])[:4]
            d["error"], d["rc"], d["text"] = int(t), int(rc), text
        elif word == "wrong":
            d["wrong"] = True
        elif word == "done":
            d["done"] = True
        elif word == "left":
            fds, threads = rest.split()
            d["left"], d["fds"], d["threads"] = True, int(fds), int(threads)
    return d


def worker_pid(out, rank):
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/environ", "rb") as f:
                env = f.read().split(b"\0")
            with open(f"/proc/{p}/comm") as f:
                comm = f.read().strip()
        except OSError:
            continue
        if comm == "fault_worker" and f"FAULT_OUT={out}".encode() in env and f"CHORUS_RANK={rank}".encode() in env:
            return int(p)
    return None


def shm_entries():
    try:
        return len(os.listdir("/dev/shm"))
    except OSError:
        return 0


def run_one(i, kind, rng, worker, base):
    out = os.path.join(base, f"{i:03d}-{kind}")
    os.makedirs(out)
    victim = rng.randrange(RANKS)
    env = dict(os.environ, CHORUS_PEER_TIMEOUT=str(PEER_TIMEOUT), CHORUS_TIMEOUT="15", CHORUS_INIT_TIMEOUT="30",
               FAULT_OUT=out, FAULT_ITERATIONS="1000000")
    args = [os.path.join(HERE, "netns-cluster"), "-k", str(RANKS), "-r", "1", "--timeout", "90"]
    fault_at = None
    if kind == "delay":
        args += ["--delay-ms", "200"]
        env["FAULT_ITERATIONS"] = "4"
    if kind in ("mismatch", "skip"):
        fault_at = rng.randrange(5, 300)
        env.update(FAULT_KIND=kind, FAULT_RANK=str(victim), FAULT_AT=str(fault_at),
                   FAULT_ITERATIONS=str(fault_at + 50))
    args += ["--", "sh", "-c", f'exec {worker} 2>"$FAULT_OUT/stderr-$CHORUS_RANK.txt"']
    shm0 = shm_entries()
    cluster = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=open(os.path.join(out, "cluster.txt"), "w"))
    tag = f"cc{cluster.pid}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not all("ready" in parse(read_rank(out, r)) for r in range(RANKS)):
        if cluster.poll() is not None:
            break
        time.sleep(0.02)
    injected = None
    stopped = None
    note = ""
    if kind in ("kill", "stop", "linkdown", "loss"):
        time.sleep(rng.uniform(0.1, 1.0))
        pid = worker_pid(out, victim)
        if pid is None:
            note = "victim not found"
        elif kind == "kill":
            injected = now_ns()
            os.kill(pid, signal.SIGKILL)
        elif kind == "stop":
            injected = now_ns()
            os.kill(pid, signal.SIGSTOP)
            stopped = pid
        else:
            ns = ["ip", "netns", "exec", f"{tag}-h{victim}"]
            cmds = [ns + ["ip", "link", "set", "eth0", "down"]] if kind == "linkdown" else \
                [ns + ["iptables", "-A", "OUTPUT", "-j", "DROP"], ns + ["iptables", "-A", "INPUT", "-j", "DROP"]]
            injected = now_ns()
            for c in cmds:
                subprocess.run(c, check=True)
    # Who must fail, and by when.
    if kind == "kill" or kind == "stop":
        expect = [r for r in range(RANKS) if r != victim]
    elif kind == "delay":
        expect = []
    else:
        expect = list(range(RANKS))
    bound = BOUNDS.get(kind, 0)
    wait_until = time.monotonic() + (40 if kind == "delay" else bound + 20)
    while time.monotonic() < wait_until:
        ds = {r: parse(read_rank(out, r)) for r in range(RANKS)}
        if kind == "delay":
            if all("left" in ds[r] for r in range(RANKS)):
                break
        elif all("left" in ds[r] for r in expect):
            break
        time.sleep(0.05)
    if stopped is not None:
        try:
            os.kill(stopped, signal.SIGKILL)
        except ProcessLookupError:
            pass  # the cluster's teardown got there first
    try:
        cluster.wait(timeout=100)
    except subprocess.TimeoutExpired:
        cluster.kill()
        cluster.wait()
    ds = {r: parse(read_rank(out, r)) for r in range(RANKS)}
    if kind in ("mismatch", "skip"):
        injected = ds[victim].get("fault")
    result = {"kind": kind, "victim": victim, "hang": False, "timeout": False, "wrong": False, "leak": [],
              "missed": False, "detect": None, "note": note, "culprit": None}
    result["wrong"] = any(d.get("wrong") for d in ds.values())
    latest = 0.0
    for r in expect:
        d = ds[r]
        if "error" not in d or injected is None:
            result["hang"] = True
            continue
        if d.get("rc") == 8:  # chorusTimeout: returned, but only when CHORUS_TIMEOUT ran out
            result["timeout"] = True
        s = (d["error"] - injected) / 1e9
        latest = max(latest, s)
        if s > bound:
            result["missed"] = True
    if kind == "delay":
        result["missed"] = not all(ds[r].get("done") for r in range(RANKS))
        if result["missed"]:
            result["note"] = "; ".join(f"rank {r}: {ds[r].get('text', 'no result')}" for r in range(RANKS)
                                       if not ds[r].get("done"))[:300]
    elif not result["hang"] and not result["timeout"]:
        result["detect"] = latest
    for r in range(RANKS):
        d = ds[r]
        if "left" in d and (d["fds"] != d["fds0"] or d["threads"] != d["threads0"]):
            result["leak"].append(f"rank {r}: fds {d['fds0']}->{d['fds']}, threads {d['threads0']}->{d['threads']}")
    if shm_entries() != shm0:
        result["leak"].append(f"/dev/shm {shm0}->{shm_entries()}")
    if result["hang"] or result["timeout"]:
        stderr = [os.path.join(out, f"stderr-{r}.txt") for r in range(RANKS)]
        said = subprocess.run([sys.executable, os.path.join(HERE, "chorus_hang.py")] +
                              [p for p in stderr if os.path.exists(p)], capture_output=True, text=True).stdout
        result["culprit"] = f"rank {victim}" in said
        result["note"] = said.strip().replace("\n", " | ")[:300]
    texts = [ds[r].get("text", "") for r in expect if ds[r].get("text")]
    result["error"] = texts[0][:160] if texts else ""
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--injections", type=int, default=len(KINDS))
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--worker", default=os.path.join(ROOT, "build", "test", "fault_worker"))
    ap.add_argument("--keep", action="store_true", help="keep each run's files (printed at the end)")
    a = ap.parse_args()
    if os.geteuid() != 0 or shutil.which("ip") is None:
        print("fault_campaign: SKIP: needs root and ip (network namespaces)")
        return 77
    kinds = a.kinds.split(",")
    for k in kinds:
        if k not in KINDS:
            print(f"fault_campaign: unknown kind '{k}' (expected {', '.join(KINDS)})")
            return 2
    rng = random.Random(a.seed)
    base = tempfile.mkdtemp(prefix="fault-campaign.")
    print(f"fault_campaign: {a.injections} injections, seed {a.seed}, {RANKS} ranks on {RANKS} simulated hosts, "
          f"CHORUS_PEER_TIMEOUT={PEER_TIMEOUT}")
    results = []
    for i in range(a.injections):
        kind = kinds[i % len(kinds)]
        r = run_one(i, kind, rng, a.worker, base)
        results.append(r)
        det = "-" if r["detect"] is None else f"{r['detect'] * 1000:.0f} ms"
        flags = [w for w, on in (("HANG", r["hang"]), ("TIMEOUT", r["timeout"]), ("WRONG", r["wrong"]), ("LEAK", r["leak"]),
                                 ("MISSED BOUND", r["missed"])) if on]
        culprit = "" if r["culprit"] is None else (" culprit named" if r["culprit"] else " CULPRIT NOT NAMED")
        print(f"{i:4d} {kind:9s} rank {r['victim']}: detected {det:>8s} {' '.join(flags)}{culprit} "
              f"{r['error'][:110]} {r['note']} {'; '.join(r['leak'])}", flush=True)
    print()
    print(f"{'kind':9s} {'runs':>5s} {'median_ms':>10s} {'max_ms':>8s} {'bound_ms':>9s} {'hangs':>6s} "
          f"{'timeouts':>9s} {'named':>6s} {'missed':>7s} {'leaks':>6s} {'wrong':>6s}")
    bad = 0
    for k in kinds:
        rs = [r for r in results if r["kind"] == k]
        if not rs:
            continue
        dets = [r["detect"] * 1000 for r in rs if r["detect"] is not None]
        hangs = sum(r["hang"] for r in rs)
        timeouts = sum(r["timeout"] and not r["hang"] for r in rs)
        named = sum(bool(r["culprit"]) for r in rs if r["hang"] or r["timeout"])
        missed = sum(r["missed"] for r in rs)
        leaks = sum(bool(r["leak"]) for r in rs)
        wrong = sum(r["wrong"] for r in rs)
        bad += hangs + missed + leaks + wrong
        med = f"{statistics.median(dets):.0f}" if dets else "-"
        mx = f"{max(dets):.0f}" if dets else "-"
        bnd = f"{BOUNDS[k] * 1000:.0f}" if k in BOUNDS else "no fail"
        print(f"{k:9s} {len(rs):5d} {med:>10s} {mx:>8s} {bnd:>9s} {hangs:6d} {timeouts:9d} {named:6d} {missed:7d} "
              f"{leaks:6d} {wrong:6d}")
    print(f"fault_campaign: {len(results)} injections: {bad} with a hang, a missed bound (a late detection by "
          f"CHORUS_TIMEOUT is one), a leak or a wrong result")
    if a.keep:
        print(f"fault_campaign: files in {base}")
    else:
        shutil.rmtree(base, ignore_errors=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
