#!/usr/bin/env python3
"""Says who is stuck where, from the ranks' flight-recorder dumps (Note [Flight recorder] in
lib/comm/flight_recorder.h): one JSON line per rank, written on a timeout, on a failure, on CHORUS_DUMP_SIGNAL or
by chorusCommDump, to CHORUS_DEBUG_FILE or stderr. Reads the files given (or stdin), finds the dump lines among any
other output, keeps each rank's latest dump per communicator, and prints one sentence per communicator, e.g.

  rank 0 and rank 1 are in AllReduce #5 (waiting for rank 2 and rank 0); rank 2 never issued #5 (last: AllReduce #4, done)

Usage: chorus_hang.py [--verbose] [FILE...]   (chorusrun ... 2>&1 | tee log; kill -USR1 ...; chorus_hang.py log)
"""
import json
import sys

MARK = '{"chorus_flight_recorder"'


def read_dumps(streams):
    comms = {}  # comm id -> rank -> dump (the latest wins)
    for stream in streams:
        for line in stream:
            at = line.find(MARK)
            if at < 0:
                continue
            try:
                d = json.loads(line[at:])
            except json.JSONDecodeError:
                continue  # a line cut by another process's output
            comms.setdefault(d["comm"], {})[d["rank"]] = d
    return comms


def ranks_text(ranks):
    names = [f"rank {r}" for r in ranks]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def collectives(d):
    return [o for o in d["ops"] if o["op"] != "Send/Recv"]


def call(o):
    return f'{o["op"]} #{o["seq"]}'


def diagnose(dumps):
    """One sentence about one communicator's dumps (rank -> dump)."""
    nranks = next(iter(dumps.values()))["nranks"]
    parts = []
    last = {r: (collectives(d) or [None])[-1] for r, d in dumps.items()}
    # A rank is "in" its last collective unless that one finished.
    inside = {r: o for r, o in last.items() if o is not None and o["state"] != "done"}
    frontier = max((o["seq"] for o in last.values() if o is not None), default=None)
    if inside:
        by_call = {}
        for r, o in sorted(inside.items()):
            by_call.setdefault((o["seq"], o["op"]), []).append(r)
        for (seq, op), ranks in sorted(by_call.items()):
            waits = [inside[r].get("last_recv_from") for r in ranks]
            verb = "is" if len(ranks) == 1 else "are"
            failed = [r for r in ranks if inside[r]["state"] == "failed"]
            text = f"{ranks_text(ranks)} {verb} in {op} #{seq}"
            if any(w is not None for w in waits):
                text += " (waiting for " + " and ".join(
                    f"rank {w}" if w is not None else "nothing posted" for w in waits) + ")"
            if failed:
                text += f" ({ranks_text(failed)}: failed there)"
            parts.append(text)
        stuck_seq = min(o["seq"] for o in inside.values())
        for r, o in sorted(last.items()):
            if o is None:
                parts.append(f"rank {r} never issued #{stuck_seq} (no collective recorded)")
            elif o["seq"] < stuck_seq:
                parts.append(f"rank {r} never issued #{stuck_seq} (last: {call(o)}, {o['state']})")
        # The same sequence number for different calls: a rank that skipped or reordered a call.
        at_stuck = {r: o for r, o in last.items() if o is not None and o["seq"] == stuck_seq}
        kinds = {(o["op"], o["count"]) for o in at_stuck.values()}
        if len(kinds) > 1:
            parts.append("mismatched calls at #" + str(stuck_seq) + ": " + "; ".join(
                f"rank {r} {o['op']} (count {o['count']})" for r, o in sorted(at_stuck.items())))
    elif frontier is not None:
        behind = [r for r, o in sorted(last.items()) if o is None or o["seq"] < frontier]
        parts.append(f"no rank is inside a call; the latest is #{frontier}" +
                     (f", which {ranks_text(behind)} did not issue" if behind else ", finished by every rank"))
    missing = [r for r in range(nranks) if r not in dumps]
    if missing:
        parts.append(f"no dump from {ranks_text(missing)} (dead, stopped, or its output went elsewhere)")
    failures = {d["failure"] for d in dumps.values() if d.get("failure")}
    if failures and not inside:
        parts.append("failure: " + sorted(failures)[0])
    return "; ".join(parts) if parts else "nothing recorded"


def main(argv):
    verbose = "--verbose" in argv
    files = [a for a in argv if a != "--verbose"]
    streams = [open(f, errors="replace") for f in files] or [sys.stdin]
    comms = read_dumps(streams)
    if not comms:
        print("no flight-recorder dumps found (lines starting " + MARK + ")")
        return 1
    for comm, dumps in sorted(comms.items()):
        prefix = f"communicator {comm}: " if len(comms) > 1 else ""
        print(prefix + diagnose(dumps))
        if verbose:
            for r, d in sorted(dumps.items()):
                ops = ", ".join(f"{call(o)} {o['state']}" for o in d["ops"][-5:])
                print(f"  {d['name']} ({d['reason'][:80]}): {ops}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
