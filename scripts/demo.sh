#!/usr/bin/env bash
# The main job: installs what is missing, builds, and runs all_reduce_perf on 4 local ranks from 8 B to 64 MiB
# with result checking on.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
[ -f build/build.ninja ] || meson setup build -Dbuildtype=release >/dev/null
ninja -C build -j"$(nproc)" >/dev/null
exec build/scripts/chorusrun -n 4 build/bench/all_reduce_perf -b 8 -e 64M -f 2 -c 1 "$@"
