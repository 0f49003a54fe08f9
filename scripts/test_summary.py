#!/usr/bin/env python3
"""Adds up meson's JUnit logs (gtest cases are reported one by one) and prints the closing line CI reads:
"N passed, N failed, N skipped". --extra NAME=1|0 counts one more check done outside meson; --skip REASON one more
skipped check, printing the reason. A meson test that
crashed or timed out (testlog.json, or NAME.json, beside the JUnit file says so) counts as one more failure, since its cases may
be missing from the JUnit log; so does one that failed although none of its cases did (a sanitizer at exit)."""
import json
import os
import sys
import xml.etree.ElementTree as ET

passed = failed = skipped = 0
args = sys.argv[1:]
while args and args[0] in ("--extra", "--skip"):
    if args[0] == "--skip":
        skipped += 1
        print(f"SKIPPED: {args[1]}")
        args = args[2:]
        continue
    name, ok = args[1].split("=")
    if ok == "1":
        passed += 1
    else:
        failed += 1
        print(f"FAILED: {name}")
    args = args[2:]
for path in args:
    try:
        root = ET.parse(path).getroot()
    except (FileNotFoundError, ET.ParseError) as e:
        print(f"cannot read {path} ({e}): counted as one failure")
        failed += 1
        continue
    # meson names a test's gtest suites PROJECT.TEST.SUITE; the tests with a failing case, by TEST:
    failing = {s.get("name", "").split(".")[1] for s in root.iter("testsuite")
               if s.get("name", "").count(".") >= 2 and (int(s.get("failures", 0)) or int(s.get("errors", 0)))}
    log = path.removesuffix(".junit.xml") + ".json"  # meson's --logbase NAME: NAME.junit.xml and NAME.json
    if os.path.exists(log):
        with open(log) as f:
            for line in f:
                t = json.loads(line)
                crashed = t.get("result") in ("TIMEOUT", "INTERRUPT", "ERROR") or t.get("returncode", 0) < 0
                failedAfterCases = t.get("result") == "FAIL" and t.get("name") not in failing
                if crashed or failedAfterCases:
                    failed += 1
                    why = "its cases passed" if failedAfterCases and not crashed else t.get("result")
                    print(f"FAILED: {t.get('name')}: {why} (exit {t.get('returncode')})")
    for case in root.iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
            print(f"FAILED: {path}: {case.get('classname')}.{case.get('name')}")
        elif case.find("skipped") is not None:
            skipped += 1
        else:
            passed += 1
print(f"{passed} passed, {failed} failed, {skipped} skipped")
