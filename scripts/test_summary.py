#!/usr/bin/env python3
"""Adds up meson's JUnit logs (gtest cases are reported one by one) and prints the closing line CI reads:
"N passed, N failed, N skipped". --extra NAME=1|0 counts one more check done outside meson."""
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
    for case in root.iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
            print(f"FAILED: {path}: {case.get('classname')}.{case.get('name')}")
        elif case.find("skipped") is not None:
            skipped += 1
        else:
            passed += 1
print(f"{passed} passed, {failed} failed, {skipped} skipped")
