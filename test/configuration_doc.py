#!/usr/bin/python3
"""docs/configuration.md says what the code's environment tables say: `chorus_info --markdown` prints the page, and
every part of it printed here must read the same in the file. A transport whose plugin is not built here prints no
section; the file's section for it is then left unchecked (said on stdout), never counted as a pass.

usage: configuration_doc.py CHORUS_INFO DOC
"""
import difflib
import subprocess
import sys


def sections(text):
    """{'': the text before the first '## ' heading, 'core': its section, ...}"""
    out, name, lines = {}, "", []
    for line in text.splitlines(keepends=True):
        if line.startswith("## "):
            out[name] = "".join(lines)
            name, lines = line[3:].strip(), []
        lines.append(line)
    out[name] = "".join(lines)
    return out


def main():
    chorus_info, doc = sys.argv[1], sys.argv[2]
    generated = sections(subprocess.run([chorus_info, "--markdown"], check=True, capture_output=True,
                                        text=True).stdout)
    with open(doc, encoding="utf-8") as f:
        written = sections(f.read())
    failures = []
    for name, text in generated.items():
        if written.get(name) != text:
            where = f"section '{name}'" if name else "the opening"
            diff = difflib.unified_diff(written.get(name, "").splitlines(keepends=True), text.splitlines(keepends=True),
                                        f"{doc}: {where}", f"chorus_info --markdown: {where}")
            failures.append("".join(diff))
    for name in written.keys() - generated.keys():
        print(f"{doc}: section '{name}' not checked: this build prints no such section (its plugin is not built here, "
              "or the code no longer has it)")
    if failures:
        print("\n".join(failures))
        print(f"{doc} disagrees with the code; regenerate it: build/scripts/chorus_info --markdown > {doc}")
        return 1
    print(f"{doc}: {len(generated)} parts agree with chorus_info --markdown")
    return 0


if __name__ == "__main__":
    sys.exit(main())
