#!/usr/bin/env python3
"""Tables of nccl-tests-style sweeps (<peer>-<nranks>.txt) from one or more run folders.

usage: peer_table.py [--stat median|best] [--vs NAME [--stream NAME]] RUN_DIR...

Without --vs: a markdown table of latency at 8 B and busbw at 64 KiB, 1 MiB, 16 MiB, 64 MiB, 256 MiB (or the
sizes in $SIZES, e.g. SIZES="8 64K 1M") per peer and rank count, over the runs.
With --vs NAME: for each rank count and every size, NAME against the best of the other peers at that size
(chosen by the same statistic), with the ratio (time ratio below 64 KiB, busbw ratio from 64 KiB) and both
sides' spread over the runs: the table of issue 18's targets.
With --stream NAME as well (bench/tcp_stream's side, tcp-stream): NAME is not a peer; from 64 KiB two more
columns give its busbw and Chorus's as a fraction of it.
--stat median (default): the median of the runs per point; best: the shortest time (highest busbw).
Rows are any line whose first field is an integer size; time is the 5th field and busbw the 7th (the peers'
layout, which all_reduce_perf prints with -P 1)."""
import collections
import os
import re
import statistics
import sys

args = sys.argv[1:]
stat, vs, stream = "median", None, None
while args and args[0].startswith("--"):
    if args[0] == "--stat" and len(args) > 1 and args[1] in ("median", "best"):
        stat, args = args[1], args[2:]
    elif args[0] == "--vs" and len(args) > 1:
        vs, args = args[1], args[2:]
    elif args[0] == "--stream" and len(args) > 1:
        stream, args = args[1], args[2:]
    else:
        sys.exit(__doc__)

SIZES = [8, 64 << 10, 1 << 20, 16 << 20, 64 << 20, 256 << 20]
if os.environ.get("SIZES"):
    SIZES = [int(x[:-1]) << {"K": 10, "M": 20, "G": 30}[x[-1]] if x[-1] in "KMG" else int(x)
             for x in os.environ["SIZES"].split()]
runs = collections.defaultdict(lambda: collections.defaultdict(list))  # (peer, n) -> size -> [(time, busbw)]
for folder in args:
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
                    runs[key][int(p[0])].append((float(p[4]), float(p[6])))
                except ValueError:
                    continue


def point(key, size):
    """(time us, busbw GB/s) of the runs by the statistic, or None."""
    v = runs.get(key, {}).get(size)
    if not v:
        return None
    if stat == "best":
        return min(t for t, _ in v), max(b for _, b in v)
    return statistics.median(t for t, _ in v), statistics.median(b for _, b in v)


def spread(key, size, small):
    v = runs[key][size]
    xs = [t for t, _ in v] if small else [b for _, b in v]
    return f"{min(xs):.1f}-{max(xs):.1f}" if small else f"{min(xs):.2f}-{max(xs):.2f}"


def label(size):
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} B"


if vs is None:
    def cell(key, size):
        p = point(key, size)
        if p is None:
            return "—"
        return f"{p[0]:.1f} µs" if size == 8 else f"{p[1]:.2f}"

    heads = [f"{label(s)} latency" if s == 8 else f"busbw {label(s)}" for s in SIZES]
    print(f"{stat} of the runs")
    print("| peer | ranks | " + " | ".join(heads) + " | runs |")
    print("|---|---|" + "---|" * len(SIZES) + "---|")
    for key in sorted(runs, key=lambda k: (k[1], k[0])):
        nruns = max(len(v) for v in runs[key].values())
        print(f"| {key[0]} | {key[1]} | " + " | ".join(cell(key, s) for s in SIZES) + f" | {nruns} |")
    sys.exit(0)

for n in sorted({k[1] for k in runs if k[0] == vs}):
    ours = (vs, n)
    others = [k for k in runs if k[1] == n and k[0] not in (vs, stream)]
    nruns = max(len(v) for v in runs[ours].values())
    streamed = stream is not None and (stream, n) in runs
    print(f"\n{vs}, {n} ranks: {stat} of {nruns} runs; time in us below 64 KiB, busbw in GB/s from 64 KiB; "
          "ratio > 1: Chorus ahead")
    extra = f" {stream} | {vs} / {stream} |" if streamed else ""
    print(f"| bytes | {vs} | its spread | best peer | peer's spread | ratio |" + extra)
    print("|---|---|---|---|---|---|" + "---|---|" * streamed)
    for size in sorted(runs[ours]):
        small = size < 64 << 10
        mine = point(ours, size)
        cands = [(p, k) for k in others if (p := point(k, size)) is not None]
        if not cands:
            continue
        best = min(cands, key=lambda c: c[0][0]) if small else max(cands, key=lambda c: c[0][1])
        (pt, pb), pk = best
        if small:
            ratio = pt / mine[0]
            row = [f"{mine[0]:.1f}", spread(ours, size, True), f"{pk[0]} {pt:.1f}", spread(pk, size, True)]
        else:
            ratio = mine[1] / pb if pb > 0 else float("inf")
            row = [f"{mine[1]:.2f}", spread(ours, size, False), f"{pk[0]} {pb:.2f}", spread(pk, size, False)]
        if streamed:
            b = point((stream, n), size)
            row += ["—", "—"] if small or b is None else [f"{b[1]:.2f}", f"{mine[1] / b[1]:.2f}"]
        print(f"| {label(size)} | " + " | ".join(row[:4]) + f" | {ratio:.2f} |" +
              "".join(f" {c} |" for c in row[4:]))
