#!/usr/bin/python3
"""Lists every Note of the code base, where it is defined and where it is cited; --check fails on a Note that is
cited but defined nowhere, or defined twice.

A Note is defined by a comment line that starts with its name and a colon: `// Note [Name]: text`, or the colon
ending the line and the text below (`#` in Python, shell and meson; `/*` or ` *` in C headers). Any other mention,
in code or in Markdown, cites it; in Markdown, mentions inside `code spans` are examples, not citations.

usage: scripts/notes.py [--check] [ROOT]
"""
import collections
import os
import re
import sys

SOURCES = (".cc", ".h", ".c", ".cu", ".py", ".sh", ".build")
DOCS = (".md",)
SKIP_DIRS = {".git", "shared", "subprojects"}
NOTE = re.compile(r"Note \[([^\]]+)\]")
DEFINITION = re.compile(r"^\s*(?://|#|/\*|\*)\s*Note \[([^\]]+)\]:")
CODE_SPAN = re.compile(r"`[^`]*`")


def files(root):
    for top, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("build"))
        for n in sorted(names):
            if n.endswith(SOURCES + DOCS):
                yield os.path.join(top, n)


def scan(root):
    defined, cited = collections.defaultdict(list), collections.defaultdict(list)
    for path in files(root):
        rel = os.path.relpath(path, root)
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.readlines()
        except UnicodeDecodeError:
            continue
        if os.path.abspath(path) == os.path.abspath(__file__):
            continue  # its own examples
        for number, line in enumerate(lines, 1):
            if rel.endswith(DOCS):
                line = CODE_SPAN.sub("", line)
            d = DEFINITION.match(line) if not rel.endswith(DOCS) else None
            for m in NOTE.finditer(line):
                where = f"{rel}:{number}"
                if d is not None and m.start() == line.index("Note ["):
                    defined[m.group(1)].append(where)
                else:
                    cited[m.group(1)].append(where)
    return defined, cited


def main():
    args = sys.argv[1:]
    check = "--check" in args
    args = [a for a in args if a != "--check"]
    root = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    defined, cited = scan(root)
    problems = [f"Note [{n}] is cited at {', '.join(w)} but defined nowhere" for n, w in sorted(cited.items())
                if n not in defined]
    problems += [f"Note [{n}] is defined {len(w)} times: {', '.join(w)}" for n, w in sorted(defined.items())
                 if len(w) > 1]
    if check:
        for p in problems:
            print(p)
        print(f"{len(defined)} Notes, {sum(len(w) for w in cited.values())} citations, {len(problems)} problems")
        return 1 if problems else 0
    for name in sorted(defined):
        refs = cited.get(name, [])
        print(f"Note [{name}]  {defined[name][0]}  cited {len(refs)}x" + (f": {', '.join(refs)}" if refs else ""))
    for p in problems:
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
