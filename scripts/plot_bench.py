#!/usr/bin/env python3
"""Plots nccl-tests-style tables: busbw and time per operation against size, one line per series, and prints the
same data as a markdown table of times. Inputs are run folders holding <series>-<nranks>.txt files (the layout
of scripts/bench_cluster.sh and bench_vs_peers.sh: size in field 1, time us in field 5, busbw GB/s in field 7);
per size the median of the runs' times is taken (--stat best: the lowest), and busbw is recomputed from it
(allreduce factor). Needs /usr/bin/python3 with python3-matplotlib for --png.

usage: plot_bench.py [--png FILE] [--title TEXT] [--stat median|best] FOLDER...
"""
import argparse
import collections
import os
import re
import sys

import bench_tables

ap = argparse.ArgumentParser()
ap.add_argument("--png")
ap.add_argument("--title", default="allreduce")
ap.add_argument("--stat", choices=sorted(bench_tables.STATS), default="median")
ap.add_argument("folders", nargs="+")
args = ap.parse_args()

times = collections.defaultdict(lambda: collections.defaultdict(list))  # series -> size -> [time us]
ranks = {}  # series -> nranks
for folder in args.folders:
    for name in sorted(os.listdir(folder)):
        m = re.match(r"(.+)-(\d+)\.txt$", name)
        if not m or name.startswith("model-"):
            continue
        series, nranks = m.group(1), int(m.group(2))
        for size, t in bench_tables.read_times(os.path.join(folder, name)):
            times[series][size].append(t)
            ranks[series] = nranks

pick = bench_tables.STATS[args.stat]
best = collections.defaultdict(dict)  # series -> size -> (time us, busbw)
for series, bysize in times.items():
    n = ranks[series]
    for size, ts in bysize.items():
        t = pick(ts)
        # busbw from the time (the tables round it to 0.01 GB/s): allreduce factor 2(n-1)/n
        best[series][size] = (t, size / t / 1e3 * 2 * (n - 1) / n if t > 0 else 0.0)

if not best:
    raise SystemExit("plot_bench: no tables found in " + " ".join(args.folders))


def label(size):
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} B"


names = sorted(best)
sizes = sorted({s for v in best.values() for s in v})
runs = max(len(ts) for v in times.values() for ts in v.values())
print(f"time per operation (us), {args.stat} of {runs} run(s); {args.title}")
print("| size | " + " | ".join(names) + " |")
print("|---|" + "---|" * len(names))
for s in sizes:
    cells = [f"{best[n][s][0]:.0f}" if s in best[n] else "—" for n in names]
    print(f"| {label(s)} | " + " | ".join(cells) + " |")
print()
print("| size | " + " | ".join(f"{n} busbw GB/s" for n in names) + " |")
print("|---|" + "---|" * len(names))
for s in sizes:
    cells = [f"{best[n][s][1]:.3f}" if s in best[n] else "—" for n in names]
    print(f"| {label(s)} | " + " | ".join(cells) + " |")

if args.png:
    try:
        import matplotlib
    except ImportError:  # the tables above are the result; the plot is an extra (Debian: python3-matplotlib)
        print(f"plot_bench: no matplotlib, {args.png} not drawn (apt install python3-matplotlib)", file=sys.stderr)
        sys.exit(0)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(13, 5))
    for n in names:
        xs = sorted(best[n])
        a1.plot(xs, [best[n][x][1] for x in xs], marker="o", ms=3, label=n)
        a2.plot(xs, [best[n][x][0] for x in xs], marker="o", ms=3, label=n)
    for ax, what in ((a1, "busbw (GB/s)"), (a2, "time per operation (us)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("size (bytes)")
        ax.set_ylabel(what)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    a2.set_yscale("log")
    fig.suptitle(args.title)
    fig.tight_layout()
    fig.savefig(args.png, dpi=110)
    print(f"\nplot: {args.png}")
