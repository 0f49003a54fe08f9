#!/usr/bin/env python3
"""The table of scripts/bench_ab.sh: per transport, ranks and size, the median over the rounds of build A and of
build B (time in us below 64 KiB, in-place busbw in GB/s from 64 KiB up) with the range over the rounds, the ratio of
the medians B/A and the median of the rounds' own ratios (A and B ran back to back in each round, so that one
cancels the machine's drift between rounds). For time, > 1 is slower; for busbw, < 1 is slower."""
import glob
import os
import re
import statistics
import sys


def nbytes(size):
    """'8', '4K', '16M' as bytes (numfmt's IEC suffixes)."""
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(size[:-1]) * mult[size[-1]] if size[-1] in mult else int(size)


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
        side, t, n, size, rnd = m.groups()
        points.setdefault((t, int(n), size), {}).setdefault(side, {})[int(rnd)] = r
    print("| transport | ranks | size | metric | A median (range) | B median (range) | B/A of medians "
          "| median of B/A per round | rounds |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (t, n, size) in sorted(points, key=lambda k: (k[0], k[1], nbytes(k[2]))):
        v = points[(t, n, size)]
        if "A" not in v or "B" not in v:
            continue
        small = nbytes(size) < 65536
        idx = 0 if small else 1
        av = [x[idx] for x in v["A"].values()]
        bv = [x[idx] for x in v["B"].values()]
        a, b = statistics.median(av), statistics.median(bv)
        both = sorted(set(v["A"]) & set(v["B"]))
        paired = statistics.median(v["B"][r][idx] / v["A"][r][idx] for r in both)
        metric = "time us" if small else "busbw GB/s"
        print(f"| {t} | {n} | {size} | {metric} | {a:.2f} ({min(av):.2f}-{max(av):.2f}) | "
              f"{b:.2f} ({min(bv):.2f}-{max(bv):.2f}) | {b / a:.3f} | {paired:.3f} | {len(both)} |")


if __name__ == "__main__":
    main()
