#!/usr/bin/env python3
"""Adds up meson's testlog.json files and prints the closing line CI reads: "N passed, N failed, N skipped"."""
import json
import sys

passed = failed = skipped = 0
for path in sys.argv[1:]:
    try:
        with open(path) as f:
            for line in f:
                result = json.loads(line).get("result", "")
                if result in ("OK", "EXPECTEDFAIL"):
                    passed += 1
                elif result == "SKIP":
                    skipped += 1
                else:
                    failed += 1
    except FileNotFoundError:
        print(f"missing {path}: counted as one failure")
        failed += 1
print(f"{passed} passed, {failed} failed, {skipped} skipped")
