#!/usr/bin/env python3
"""Holds the cost model against measurements: for every model-<n>.txt (the output of `chorus_info --comm` on n
ranks, which prints every algorithm's predicted time at 8 B * 4^k) next to chorus-RING-<n>.txt and
chorus-TREE-<n>.txt (all_reduce_perf -P 1 tables) in the given run folders, prints predicted against measured
time (median of the runs; --stat best: the lowest) and the relative error per size, and the largest error per algorithm and rank count.

usage: validate_model.py [--max-bytes N] [--stat median|best] FOLDER...
"""
import argparse
import collections
import os
import re

import bench_tables

ap = argparse.ArgumentParser()
ap.add_argument("--max-bytes", type=int, default=1 << 40)
ap.add_argument("--stat", choices=sorted(bench_tables.STATS), default="median")
ap.add_argument("folders", nargs="+")
args = ap.parse_args()

runs = collections.defaultdict(lambda: collections.defaultdict(list))  # (algo, n) -> size -> [us]
predictions = collections.defaultdict(lambda: collections.defaultdict(list))  # (algo, n) -> size -> [us]
model_line = {}
for folder in args.folders:
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        m = re.match(r"chorus-(RING|TREE)-(\d+)\.txt$", name)
        if m:
            key = (m.group(1).lower(), int(m.group(2)))
            for size, t in bench_tables.read_times(path):
                runs[key][size].append(t)
            continue
        m = re.match(r"model-(\d+)\.txt$", name)
        if m:
            n = int(m.group(1))
            table = False
            for line in open(path):
                if line.startswith("cost model:"):
                    model_line[n] = line.strip()
                if line.startswith("predicted us"):
                    table = True
                    continue
                p = line.split()
                if table and len(p) >= 3 and p[0].isdigit():
                    predictions[("ring", n)][int(p[0])].append(float(p[1]))
                    predictions[("tree", n)][int(p[0])].append(float(p[2]))

# Each run's communicator measured its own alpha and beta: its predictions go with its measurements, and both
# are summarised the same way.
pick = bench_tables.STATS[args.stat]
measured = {k: {size: pick(ts) for size, ts in v.items()} for k, v in runs.items()}
predicted = {k: {size: pick(ts) for size, ts in v.items()} for k, v in predictions.items()}

worst = {}
for n in sorted({k[1] for k in predicted}):
    print(f"## {n} ranks — {model_line.get(n, '')}")
    print("| size | ring predicted us | ring measured us | error | tree predicted us | tree measured us | error |")
    print("|---|---|---|---|---|---|---|")
    for size in sorted(predicted[("ring", n)]):
        if size > args.max_bytes:
            continue
        cells = []
        for algo in ("ring", "tree"):
            p = predicted[(algo, n)].get(size)
            mt = measured[(algo, n)].get(size)
            if p is None or mt is None:
                cells += ["—", "—", "—"]
                continue
            err = (p - mt) / mt * 100
            worst[(algo, n)] = max(worst.get((algo, n), 0), abs(err))
            cells += [f"{p:.0f}", f"{mt:.0f}", f"{err:+.0f}%"]
        print(f"| {size} | " + " | ".join(cells) + " |")
    print()
print("largest |error|: " + ", ".join(f"{a} n={n}: {e:.0f}%" for (a, n), e in sorted(worst.items())))
