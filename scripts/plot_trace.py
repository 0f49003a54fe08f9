#!/usr/bin/env python3
"""Renders a chorus_ddp_train --trace file (Chrome trace JSON) as a PNG timeline: per rank one row of compute
(forward, backward by layer, optimizer, waiting for gradients) and one of communication (bucket AllReduces).

usage: scripts/plot_trace.py TRACE.json OUT.png [--last-steps K]
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"forward": "#4c78a8", "backward": "#72b7b2", "optimizer": "#b279a2", "wait": "#e45756",
          "bucket": "#f58518"}


def color(name):
    for key, c in COLORS.items():
        if name.startswith(key):
            return c
    return "#999999"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("out")
    ap.add_argument("--last-steps", type=int, default=2, help="show only the last K optimizer steps")
    a = ap.parse_args()
    events = [e for e in json.load(open(a.trace))["traceEvents"] if e.get("ph") == "X"]
    ranks = sorted({e["pid"] for e in events})
    # The window: from the start of the K-th last forward of rank 0 to the end of everything after it.
    starts = sorted(e["ts"] for e in events if e["pid"] == ranks[0] and e["name"] == "forward")
    t0 = starts[-a.last_steps] if len(starts) >= a.last_steps else 0
    shown = [e for e in events if e["ts"] + e["dur"] >= t0]
    fig, ax = plt.subplots(figsize=(12, 1.1 * len(ranks) + 1.2))
    rows = []
    for r in ranks:
        for tid, label in ((1, "compute"), (2, "communication")):
            y = len(rows)
            rows.append(f"rank {r} {label}")
            for e in shown:
                if e["pid"] == r and e["tid"] == tid:
                    ax.broken_barh([((e["ts"] - t0) / 1000, e["dur"] / 1000)], (y - 0.4, 0.8),
                                   facecolors=color(e["name"]), edgecolor="white", linewidth=0.5)
                    if e["dur"] / 1000 > 12 and tid == 2:
                        ax.text((e["ts"] - t0 + e["dur"] / 2) / 1000, y, e["name"].replace("bucket ", "b"),
                                ha="center", va="center", fontsize=7)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(rows)
    ax.invert_yaxis()
    ax.set_xlabel("ms")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLORS.values()]
    ax.legend(handles, ["forward", "backward", "optimizer", "wait for gradients", "bucket AllReduce"],
              loc="upper center", bbox_to_anchor=(0.5, -0.25 if len(ranks) < 3 else -0.12), ncol=5, fontsize=8)
    ax.set_title(f"chorus_ddp_train: the last {a.last_steps} steps")
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)


if __name__ == "__main__":
    main()
