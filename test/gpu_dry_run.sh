#!/usr/bin/env bash
# The GPU check rehearsed without a GPU: scripts/gpu-bundle.sh makes the bundle from this build, and
# scripts/gpu-check.sh --bundle --dry-run checks that every binary resolves its libraries from it and that every
# step's command line starts, within the check's time budget. A typo cannot then waste a GPU window. Then
# scripts/gpu_judge.py on made-up figures: it tells targets met from "slow".
#   test/gpu_dry_run.sh BUILD
set -uo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$1" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$src/scripts/gpu-bundle.sh" "$tmp/bundle" "$build" || exit 1
OUT=$tmp/out "$src/scripts/gpu-check.sh" --bundle "$tmp/bundle" --dry-run > "$tmp/check.log" 2>&1
rc=$?
grep -E '^(--|planned|gpu-check)' "$tmp/check.log"
[ "$rc" -eq 0 ] || exit "$rc"
# The judge on figures of a made-up GPU: R = 2826 GB/s, busbw 500 GB/s at 128 MiB, 15 us at 8 B: every target met;
# then 300 GB/s (under 70% of 2R/10): slow.
mkdir -p "$tmp/fig"
printf '# d2d_copy\n  268435456 190.0 2825.7\n' > "$tmp/fig/d2d_copy.log"
row() { printf '[0] %12s %12s float sum -1 %8s %6s %6s 0 %8s %6s %6s 0\n' "$@"; }
{ row 8 2 15.0 0.00 0.00 15.0 0.00 0.00; row 134217728 33554432 268.4 500.0 500.0 268.4 500.0 500.0; } \
  > "$tmp/fig/all_reduce_perf.log"
"$src/scripts/gpu_judge.py" "$tmp/fig" || { echo "gpu_judge: targets met, but it said otherwise"; exit 1; }
{ row 8 2 15.0 0.00 0.00 15.0 0.00 0.00; row 134217728 33554432 268.4 300.0 300.0 268.4 300.0 300.0; } \
  > "$tmp/fig/all_reduce_perf.log"
"$src/scripts/gpu_judge.py" "$tmp/fig"
[ $? -eq 4 ] || { echo "gpu_judge: 300 GB/s is slow, but it said otherwise"; exit 1; }
echo "gpu_judge: met and slow both told"
