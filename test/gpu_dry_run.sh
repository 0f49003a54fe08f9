#!/usr/bin/env bash
# The GPU check rehearsed without a GPU: scripts/gpu-bundle.sh makes the bundle from this build, and
# scripts/gpu-check.sh --bundle --dry-run checks that every binary resolves its libraries from it and that every
# step's command line starts, within the check's time budget. A typo cannot then waste a GPU window.
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
exit $rc
