#!/usr/bin/env python3
"""Reads nccl-tests-style tables (<peer>-<nranks>.txt) from one or more run folders and prints a markdown table:
latency at 8 B and busbw at 64 KiB, 1 MiB, 16 MiB, 64 MiB, 256 MiB per peer and rank count, best of the runs
(lowest time), plus the run-to-run spread. Rows are any line whose first field is an integer size; time is the
5th field and busbw the 7th (the peers' layout, which all_reduce_perf prints with -P 1)."""
import collections
import os
import re
import sys

SIZES = [8, 64 << 10, 1 << 20, 16 << 20, 64 << 20, 256 << 20]
if os.environ.get("SIZES"):  # e.g. SIZES="8 64K 128K 1M": the columns to print
    SIZES = [int(x[:-1]) << {"K": 10, "M": 20, "G": 30}[x[-1]] if x[-1] in "KMG" else int(x)
             for x in os.environ["SIZES"].split()]
best = collections.defaultdict(dict)   # (peer, n) -> size -> (time, busbw)
runs = collections.defaultdict(lambda: collections.defaultdict(list))
for folder in sys.argv[1:]:
    for name in sorted(os.listdir(folder)):
        m = re.match(r"(.+)-(\d+)\.txt$", name)
        if not m:
            continue
        key = (m.group(1), int(m.group(2)))
        with open(os.path.join(folder, name)) as f:
            for line in f:
                p = line.split()
                if len(p) < 8 or not p[0].isdigit():
                    continue
                try:
                    size, t, bw = int(p[0]), float(p[4]), float(p[6])
                except ValueError:
                    continue
                runs[key][size].append(t)
                if size not in best[key] or t < best[key][size][0]:
                    best[key][size] = (t, bw)


def cell(key, size):
    if size not in best[key]:
        return "—"
    t, bw = best[key][size]
    return f"{t:.1f} µs" if size == 8 else f"{bw:.2f}"


def label(size):
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} B"


heads = [f"{label(s)} latency" if s == 8 else f"busbw {label(s)}" for s in SIZES]
print("| peer | ranks | " + " | ".join(heads) + " | runs |")
print("|---|---|" + "---|" * len(SIZES) + "---|")
for key in sorted(best, key=lambda k: (k[1], k[0])):
    nruns = max(len(v) for v in runs[key].values())
    print(f"| {key[0]} | {key[1]} | " + " | ".join(cell(key, s) for s in SIZES) + f" | {nruns} |")
