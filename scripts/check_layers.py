#!/usr/bin/env python3
"""Fails when a source file includes a header from a layer above its own (docs/architecture.md).

Usage: check_layers.py [SOURCE_ROOT]. Prints every offending include as file:line and exits 1 if any.
"""
import os
import re
import sys

# Each layer: the folder prefixes it may include from (its own always). Longest prefix wins, so a sub-folder
# can be stricter than its parent.
FOUNDATIONS = ["include/chorus/", "lib/kernels/", "lib/mem/", "lib/base/"]
LAYERS = {
    "include/chorus/": ["include/chorus/"],
    "lib/kernels/": ["include/chorus/"],
    "lib/mem/": ["include/chorus/", "lib/kernels/"],
    "lib/base/": ["include/chorus/", "lib/kernels/", "lib/mem/"],
    "transports/": FOUNDATIONS,
    "algorithms/": FOUNDATIONS,
    "lib/comm/": FOUNDATIONS + ["transports/", "algorithms/"],
    "lib/api/": FOUNDATIONS + ["lib/comm/"],
    # The data-parallel layer sits on the public C API: it may use the C boundary's error helpers, nothing of
    # the communicator.
    "ddp/": FOUNDATIONS + ["lib/api/api_guard.h"],
    "ddp/trainer/": ["include/chorus/"],
    "ddp/torch/": ["include/chorus/"],  # the torch.distributed backend: a client of the C API
    "bench/": ["include/chorus/", "lib/kernels/"],
    "scripts/": None,  # tools and tests may include anything
    "test/": None,
}
SOURCE = re.compile(r"\.(c|cc|cpp|h|hpp|cu|cuh)$")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer_of(path):
    best = None
    for prefix in LAYERS:
        if path.startswith(prefix) and (best is None or len(prefix) > len(best)):
            best = prefix
    # A transport's own folder may include the shared transport headers and itself, never a sibling transport.
    m = re.match(r"(transports/[^/]+/)", path)
    if m and best == "transports/":
        return m.group(1)
    return best


def allowed(src_layer, target):
    if src_layer.startswith("transports/") and src_layer != "transports/":
        if target.startswith("transports/"):
            return target.startswith(src_layer) or "/" not in target[len("transports/"):]
        return any(target.startswith(p) for p in FOUNDATIONS)
    rules = LAYERS[src_layer]
    if rules is None:
        return True
    return target.startswith(src_layer) or any(target == p or target.startswith(p) for p in rules)


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    bad = []
    checked = 0
    for prefix in LAYERS:
        for dirpath, _, names in os.walk(os.path.join(root, prefix)):
            for name in names:
                if not SOURCE.search(name):
                    continue
                full = os.path.join(dirpath, name)
                rel = os.path.relpath(full, root)
                layer = layer_of(rel)
                if layer != prefix and not (layer.startswith(prefix) and prefix == "transports/"):
                    continue  # visited under its own (longer) prefix
                checked += 1
                with open(full, encoding="utf-8", errors="replace") as f:
                    for lineno, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        target = m.group(1)
                        if target.startswith("chorus/"):
                            target = "include/" + target  # the public headers, found through include/
                        local = os.path.relpath(os.path.join(dirpath, target), root)
                        if not os.path.exists(os.path.join(root, target)) and os.path.exists(os.path.join(root, local)):
                            target = local  # "harness.h" beside the file
                        if not allowed(layer, target):
                            bad.append(f"{rel}:{lineno}: layer {layer} may not include \"{m.group(1)}\"")
    for b in bad:
        print(b)
    print(f"checked {checked} files: {len(bad)} include(s) across layers")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
