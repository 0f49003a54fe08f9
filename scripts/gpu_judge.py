#!/usr/bin/python3
"""Judges the GPU check's figures against issue 39's targets, from the step logs in OUT (scripts/gpu-check.sh):

  the bound: R, the device's copy rate (bytes read plus written per second) from d2d_copy at >= 64 MiB, and for n
  ranks on the GPU a ring AllReduce over device IPC moves 5(n-1)S bytes through its memory, so busbw <= 2R/(5n)
  (docs/device-memory.md: the arithmetic);
  slow: busbw at >= 64 MiB under 70% of that bound (all_reduce_perf, out of place), or an 8-byte blocking
  AllReduce over 20 us.

Writes OUT/figures.md (the table) and prints it; exit 0 when every target is met, 4 when one is not ("slow"), 5 when
a figure is missing (a step failed before measuring it).
  scripts/gpu_judge.py OUT [--ranks 2]
"""
import argparse
import os
import re
import sys


def copy_rate(path):
    """The highest GB/s(r+w) of d2d_copy at 64 MiB or more."""
    best = None
    for line in open(path, errors="replace"):
        f = line.split()
        if len(f) == 3 and f[0].isdigit() and int(f[0]) >= 64 << 20:
            best = max(best or 0.0, float(f[2]))
    return best


def all_reduce(path):
    """{bytes: (out-of-place time us, busbw GB/s)} from all_reduce_perf's table (rank 0's lines)."""
    rows = {}
    for line in open(path, errors="replace"):
        f = re.sub(r"^\[\d+\]\s*", "", line).split()
        if len(f) >= 8 and f[0].isdigit() and f[2] in ("float", "half", "bfloat16", "double"):
            rows[int(f[0])] = (float(f[5]), float(f[7]))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--ranks", type=int, default=2)
    args = ap.parse_args()
    n = args.ranks
    try:
        r = copy_rate(os.path.join(args.out, "d2d_copy.log"))
        rows = all_reduce(os.path.join(args.out, "all_reduce_perf.log"))
    except OSError as e:
        print(f"gpu_judge: {e}")
        return 5
    large = [b for b in rows if b >= 64 << 20]
    if r is None or 8 not in rows or not large:
        print("gpu_judge: a figure is missing (d2d_copy at >= 64 MiB, or all_reduce_perf at 8 B and >= 64 MiB)")
        return 5
    bound = 2 * r / (5 * n)
    busbw = max(rows[b][1] for b in large)
    lat = rows[8][0]
    ok_bw, ok_lat = busbw >= 0.7 * bound, lat <= 20.0
    table = (f"| figure | measured | target | met |\n|---|---|---|---|\n"
             f"| device copy rate R (d2d_copy, >= 64 MiB, read + written) | {r:.0f} GB/s | | |\n"
             f"| AllReduce busbw at >= 64 MiB, {n} ranks | {busbw:.1f} GB/s | >= 0.7 x 2R/(5x{n}) = "
             f"{0.7 * bound:.1f} GB/s ({busbw / bound:.0%} of the bound) | {'yes' if ok_bw else 'no'} |\n"
             f"| AllReduce 8 B, blocking | {lat:.1f} us | <= 20 us | {'yes' if ok_lat else 'no'} |\n")
    # Informative, not judged: the same calls cut in the host transports' 1 MiB chunks (Note [Device IPC chunks]).
    try:
        host = all_reduce(os.path.join(args.out, "all_reduce_perf_host_chunks.log"))
    except OSError:
        host = {}
    for b in sorted(set(host) & set(large)):
        table += (f"| AllReduce {b >> 20} MiB busbw, 1 MiB chunks against device IPC's | {host[b][1]:.1f} against "
                  f"{rows[b][1]:.1f} GB/s | | |\n")
    with open(os.path.join(args.out, "figures.md"), "w") as f:
        f.write(table)
    print(table, end="")
    return 0 if ok_bw and ok_lat else 4


if __name__ == "__main__":
    sys.exit(main())
