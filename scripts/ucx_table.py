#!/usr/bin/env python3
"""The tables of scripts/bench_ucx.sh: for each UCX_TLS and rank count, per size, the median over the rounds of
Chorus over UCX, Open MPI over UCX (pml ucx), Chorus's own shm and tcp (time at 8 B, busbw from 64 KiB), the
ratio Chorus-ucx / Open MPI-ucx, and, for 2 ranks, Chorus-ucx's busbw as a share of ucx_perftest's tag_bw.

usage: ucx_table.py [--stat median|best] RUN_DIR...   (each holding NAME-N.txt tables and perftest-TLS.txt)
--stat best: the best round per point (shortest time, highest busbw), robust to a round that a noisy machine
slowed; median by default. Tables for the rounds' hosts-*.txt files too (bench_ucx.sh's hosts stage)."""
import collections
import os
import re
import statistics
import sys

times = collections.defaultdict(lambda: collections.defaultdict(list))  # (name, n) -> size -> [(t, busbw)]
perf = collections.defaultdict(lambda: collections.defaultdict(list))   # tls -> size -> [GB/s]
args = sys.argv[1:]
stat = "median"
if args[:1] == ["--stat"]:
    stat, args = args[1], args[2:]
for folder in args:
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        m = re.match(r"perftest-(\w+)\.txt$", name)
        if m:
            for line in open(path):
                p = line.split()
                if len(p) == 2:
                    try:
                        perf[m.group(1)][int(p[0])].append(float(p[1]) * (1 << 20) / 1e9)  # MiB/s
                    except ValueError:
                        pass
            continue
        m = re.match(r"(.+)-(\d+)\.txt$", name)
        if not m:
            continue
        for line in open(path):
            p = line.split()
            if len(p) >= 8 and p[0].isdigit():
                try:
                    times[(m.group(1), int(m.group(2)))][int(p[0])].append((float(p[4]), float(p[6])))
                except ValueError:
                    pass


def med(name, n, size, idx):
    """The statistic of the rounds: median, or best (least time for idx 0, most busbw for idx 1)."""
    v = times.get((name, n), {}).get(size)
    if not v:
        return None
    xs = [x[idx] for x in v]
    if stat == "best":
        return min(xs) if idx == 0 else max(xs)
    return statistics.median(xs)


def perfStat(xs):
    return (max(xs) if stat == "best" else statistics.median(xs)) if xs else None


def label(size):
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} B"


def fmt(x, digits=2):
    return "—" if x is None else f"{x:.{digits}f}"


tlss = sorted({k[0][len("chorus-ucx-"):] for k in times if k[0].startswith("chorus-ucx-")})
for tls in tlss:
    for n in sorted({k[1] for k in times if k[0] == f"chorus-ucx-{tls}"}):
        sizes = sorted(times[(f"chorus-ucx-{tls}", n)])
        print(f"\n### UCX_TLS={tls}, {n} ranks ({stat} of {len(args)} rounds; below 64 KiB: time in us, "
              f"from 64 KiB: busbw in GB/s)\n")
        cols = ["chorus-ucx", "openmpi-ucx", "ucx/ompi", "chorus-shm", "chorus-tcp"]
        if n == 2:
            cols += ["ucx_perftest GB/s", "chorus-ucx / perftest"]
        print("| size | " + " | ".join(cols) + " |")
        print("|---|" + "---|" * len(cols))
        for s in sizes:
            idx = 0 if s < 64 * 1024 else 1
            cu = med(f"chorus-ucx-{tls}", n, s, idx)
            om = med(f"openmpi-ucx-{tls}", n, s, idx)
            ratio = None if cu is None or om is None or cu == 0 else (om / cu if idx == 0 else cu / om)
            row = [fmt(cu), fmt(om), fmt(ratio), fmt(med("chorus-shm", n, s, idx)), fmt(med("chorus-tcp", n, s, idx))]
            if n == 2:
                pt = perfStat(perf[tls].get(s))
                row += [fmt(pt), fmt(None if pt is None or cu is None or idx == 0 else cu / pt)]
            print(f"| {label(s)} | " + " | ".join(row) + " |")
if ("hosts-chorus-ucx", 2) in times:
    rounds = len(times[("hosts-chorus-ucx", 2)][8]) if 8 in times[("hosts-chorus-ucx", 2)] else 0
    print(f"\n### 2 simulated hosts (scripts/netns-cluster), one rank each, UCX_TLS=tcp ({stat} of {rounds} "
          "rounds; time in us, busbw in GB/s)\n")
    print("| size | chorus-ucx time | chorus-tcp time | ucx busbw | tcp busbw | ucx / tcp (speed) |")
    print("|---|---|---|---|---|---|")
    for s in sorted(times[("hosts-chorus-ucx", 2)]):
        tu, tt = med("hosts-chorus-ucx", 2, s, 0), med("hosts-chorus-tcp", 2, s, 0)
        bu, bt = med("hosts-chorus-ucx", 2, s, 1), med("hosts-chorus-tcp", 2, s, 1)
        ratio = None if tu is None or tt is None or tu == 0 else tt / tu
        print(f"| {label(s)} | {fmt(tu)} | {fmt(tt)} | {fmt(bu, 3)} | {fmt(bt, 3)} | {fmt(ratio)} |")
    print("\nucx / tcp: Chorus-over-tcp's time / Chorus-over-UCX's (>= 0.9: within 10 %).")
print("\nucx/ompi: Open MPI's time / Chorus's below 64 KiB, Chorus's busbw / Open MPI's from 64 KiB "
      "(> 1: Chorus faster).")
