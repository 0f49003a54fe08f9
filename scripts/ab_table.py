#!/usr/bin/env python3
"""The table of scripts/bench_ab.sh: per transport, ranks and size, the median over the rounds of build A and of
build B (time in us at 8 B, in-place busbw in GB/s from 1 MiB up) and the ratio B/A (for time, > 1 is slower;
for busbw, < 1 is slower)."""
import glob
import os
import re
import statistics
import sys


def row(path):
    """(time us, busbw GB/s) of the in-place columns of the file's table row."""
    with open(path) as f:
        for line in f:
            p = line.split()
            if len(p) >= 13 and p[0].isdigit():
                return float(p[9]), float(p[11])
    return None


def main():
    out = sys.argv[1]
    points = {}
    for path in glob.glob(os.path.join(out, "*.run*.txt")):
        m = re.match(r"([AB])-(\w+)-(\d+)-(\w+)\.run(\d+)\.txt$", os.path.basename(path))
        if not m:
            continue
        r = row(path)
        if r is None:
            continue
        side, t, n, size, _ = m.groups()
        points.setdefault((t, int(n), size), {}).setdefault(side, []).append(r)
    print("| transport | ranks | size | metric | A (median) | B (median) | B/A | rounds |")
    print("|---|---|---|---|---|---|---|---|")
    order = {"8": 0}
    for (t, n, size) in sorted(points, key=lambda k: (k[0], k[1], order.get(k[2], 1), len(k[2]), k[2])):
        v = points[(t, n, size)]
        if "A" not in v or "B" not in v:
            continue
        small = size == "8"
        idx = 0 if small else 1
        a = statistics.median(x[idx] for x in v["A"])
        b = statistics.median(x[idx] for x in v["B"])
        metric = "time us" if small else "busbw GB/s"
        print(f"| {t} | {n} | {size} | {metric} | {a:.2f} | {b:.2f} | {b / a:.3f} | {min(len(v['A']), len(v['B']))} |")


if __name__ == "__main__":
    main()
