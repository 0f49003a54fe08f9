#!/usr/bin/env python3
"""Adds up meson's JUnit logs (gtest cases are reported one by one) and prints the closing line CI reads:
"N passed, N failed, N skipped". --extra NAME=1|0 counts one more check done outside meson. A meson test that
crashed or timed out (testlog.json, or NAME.json, beside the JUnit file says so) counts as one more failure, since its cases may
be missing from the JUnit log."""
import json
import os
import sys
import xml.etree.ElementTree as ET

passed = failed = skipped = 0
args = sys.argv[1:]
while args and args[0] == "--extra":
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
    log = path.removesuffix(".junit.xml") + ".json"  # meson's --logbase NAME: NAME.junit.xml and NAME.json
    if os.path.exists(log):
        with open(log) as f:
            for line in f:
                t = json.loads(line)
                if t.get("result") in ("TIMEOUT", "INTERRUPT", "ERROR") or t.get("returncode", 0) < 0:
                    failed += 1
                    print(f"FAILED: {t.get('name')}: {t.get('result')} (exit {t.get('returncode')})")
    for case in root.iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
            print(f"FAILED: {path}: {case.get('classname')}.{case.get('name')}")
        elif case.find("skipped") is not None:
            skipped += 1
        else:
            passed += 1
print(f"{passed} passed, {failed} failed, {skipped} skipped")
