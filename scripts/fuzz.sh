#!/usr/bin/env bash
# The libFuzzer targets of test/fuzz (one per parser of outside bytes), in a clang build of their own (build-fuzz:
# clang++-14, ASan+UBSan, libFuzzer's coverage on the whole library).
#   scripts/fuzz.sh                 build, then replay every corpus once
#   scripts/fuzz.sh build           build only (CI then replays the corpora as the meson suite 'fuzz')
#   scripts/fuzz.sh RUNS [TARGET..] build, then fuzz each target (all by default) for RUNS executions, adding what
#                                   it finds to test/fuzz/corpus/TARGET, then minimise that corpus
# Prints one line per target; exits non-zero on a finding (libFuzzer leaves crash-*/leak-*/timeout-* files here).
set -euo pipefail
cd "$(dirname "$0")/.."
targets=(unique_id bootstrap env tcp_frames shm_control hello ibverbs_frames)
runs=${1:-0}
[ $# -gt 1 ] && targets=("${@:2}")
if [ ! -f build-fuzz/build.ninja ]; then
  CC=clang-14 CXX=clang++-14 meson setup build-fuzz -Dfuzz=enabled -Db_sanitize=address,undefined -Db_lundef=false \
    -Dcpp_args=-fsanitize=fuzzer-no-link -Dwerror=false -Dbuildtype=debugoptimized -Dcuda=disabled -Dtorch=disabled \
    -Ducx=disabled -Dmicrobench=disabled >/dev/null
fi
ninja -C build-fuzz "${targets[@]/#/test/fuzz_}" >/dev/null
[ "$runs" = build ] && exit 0
export CHORUS_SOCKET_IFNAME==lo ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
status=0
for t in "${targets[@]}"; do
  corpus=test/fuzz/corpus/$t
  mkdir -p "$corpus"
  if [ "$runs" = 0 ]; then
    if build-fuzz/test/fuzz_$t "$corpus" -runs=0 > "build-fuzz/fuzz_$t.log" 2>&1; then
      echo "fuzz_$t: replayed $(ls "$corpus" | wc -l) inputs: no finding"
    else
      echo "fuzz_$t: FAILED (build-fuzz/fuzz_$t.log)"; status=1
    fi
    continue
  fi
  new=$(mktemp -d)
  start=$(date +%s)
  if build-fuzz/test/fuzz_$t "$new" "$corpus" -runs="$runs" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
       -print_final_stats=1 > "build-fuzz/fuzz_$t.log" 2>&1; then
    merged=$(mktemp -d)
    build-fuzz/test/fuzz_$t -merge=1 "$merged" "$corpus" "$new" > /dev/null 2>&1
    rm -rf "$corpus" && mv "$merged" "$corpus" && chmod 755 "$corpus"
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "build-fuzz/fuzz_$t.log" | grep -o '[0-9]*$')
    cov=$(grep -o 'cov: [0-9]*' "build-fuzz/fuzz_$t.log" | tail -1)
    echo "fuzz_$t: $execs executions in $(( $(date +%s) - start )) s, $cov, no finding; corpus $(ls "$corpus" | wc -l) inputs"
  else
    echo "fuzz_$t: FINDING (build-fuzz/fuzz_$t.log)"; tail -30 "build-fuzz/fuzz_$t.log"; status=1
  fi
  rm -rf "$new"
done
exit $status
