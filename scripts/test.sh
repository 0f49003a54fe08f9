#!/usr/bin/env bash
# Installs what is missing, builds Chorus (warnings are errors), runs the whole test suite, then the unit tests
# again under AddressSanitizer+UBSan and the threaded ones under ThreadSanitizer. Ends with "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh || exit 1
jobs=$(nproc)

build() {  # build <dir> <meson options...>
  local dir=$1; shift
  if [ -f "$dir/build.ninja" ]; then meson setup --reconfigure "$dir" "$@" >/dev/null
  else meson setup "$dir" "$@" >/dev/null; fi && ninja -C "$dir" -j"$jobs" >/dev/null
}

# The NAME-ucx runs of the given suites, where the build made the UCX plugin.
ucx_suites() {
  local dir=$1; shift
  meson test -C "$dir" --list 2>/dev/null | grep -qx 'smoke-ucx' || return 0
  for t in "$@"; do echo "$t-ucx"; done
}

status=0
build build -Dwerror=true -Dbuildtype=debugoptimized || { echo "build failed"; ninja -C build -j1 | tail -40; exit 1; }
meson test -C build --print-errorlogs --num-processes 1 || status=1

# The installed library builds a C program through pkg-config, as another project would.
stage=$(mktemp -d)
if meson install -C build --destdir "$stage" >/dev/null; then
  pc=$(find "$stage" -name chorus.pc -printf '%h\n' | head -1)
  if PKG_CONFIG_SYSROOT_DIR="$stage" PKG_CONFIG_PATH="$pc" \
       cc -std=c11 -Wall -Werror test/example.c -o "$stage/example" \
       $(PKG_CONFIG_SYSROOT_DIR="$stage" PKG_CONFIG_PATH="$pc" pkg-config --cflags --libs chorus); then
    echo "pkg-config build of test/example.c: OK"; pkgconfig_ok=1
  else echo "pkg-config build of test/example.c: FAILED"; pkgconfig_ok=0; status=1; fi
else echo "meson install failed"; pkgconfig_ok=0; status=1; fi
rm -rf "$stage"

# Sanitizers: the in-process suites (threads as ranks) plus the kernels.
build build-asan -Dwerror=true -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debug -Dmicrobench=disabled -Dtorch=disabled \
  || { echo "asan build failed"; exit 1; }
# errors-ucx and transports (UCX in-process, after aborted transfers) run under ASan+UBSan without LeakSanitizer:
# at exit LSan's own tracer crashes now and then (SIGSEGV in StopTheWorld: errors-ucx ~1 run in 12, transports once
# in CI after all its cases passed) while UCX's threads wind down; no leak was ever reported.
leak_transports=(transports) noleak_suites=()
if [ -n "$(ucx_suites build-asan errors)" ]; then leak_transports=() noleak_suites=(transports errors-ucx); fi
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  meson test -C build-asan --print-errorlogs --num-processes 1 reduce kernel_elements smoke errors shm tree_shape \
  selection tree ddp ddp_train mlp memory_spaces device_ipc cuda_driver \
  "${leak_transports[@]}" $(ucx_suites build-asan smoke ddp failures) || status=1
if [ ${#noleak_suites[@]} -gt 0 ]; then
  ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    meson test -C build-asan --print-errorlogs --num-processes 1 --logbase asan-noleak "${noleak_suites[@]}" || status=1
fi
build build-tsan -Dwerror=true -Db_sanitize=thread -Db_lundef=false -Dbuildtype=debugoptimized -Dmicrobench=disabled -Dtorch=disabled \
  || { echo "tsan build failed"; exit 1; }
TSAN_OPTIONS=halt_on_error=1 meson test -C build-tsan --print-errorlogs --num-processes 1 smoke errors shm tree ddp ddp_train \
  memory_spaces smoke-tcp transports $(ucx_suites build-tsan smoke errors ddp) || status=1
# device_ipc's 2-rank cases on their own (its 3- and 4-rank ones run in the other builds). In CI (not reproduced
# elsewhere) TSan's runtime has twice died in this suite remapping its own shadow ("ThreadSanitizer failed to allocate
# 0x1fd... bytes", ENOMEM), with no report: such a run is tried again, up to three times, and if TSan itself fails
# every time the suite counts as skipped, with that reason; a race report, or any other failure, fails.
tsan_ipc_skip=()
for try in 1 2 3; do
  TSAN_OPTIONS=halt_on_error=1 meson test -C build-tsan --print-errorlogs --num-processes 1 --logbase tsan-ipc \
    device_ipc --test-args='--gtest_filter=*/0:DeviceIpcLimits.*:DeviceIpcErrors.*:DeviceIpcSwitch.*' \
    > build-tsan/tsan-ipc.out 2>&1 && { tsan_ipc=ok; break; }
  tsan_ipc=failed
  grep -q 'ThreadSanitizer failed to allocate' build-tsan/tsan-ipc.out &&
    ! grep -q 'WARNING: ThreadSanitizer:' build-tsan/tsan-ipc.out || break
  tsan_ipc=tsan-runtime
  echo "device_ipc under TSan, try $try: TSan's runtime failed to allocate (no report); trying again"
done
cat build-tsan/tsan-ipc.out
tsan_ipc_logs=(build-tsan/meson-logs/tsan-ipc.junit.xml)
case $tsan_ipc in
  failed) status=1 ;;
  tsan-runtime) tsan_ipc_logs=() tsan_ipc_skip=(--skip "device_ipc under TSan: TSan's runtime failed to remap its shadow in 3 tries") ;;
esac

noleak=()
[ ${#noleak_suites[@]} -gt 0 ] && noleak=(build-asan/meson-logs/asan-noleak.junit.xml)
python3 scripts/test_summary.py "${tsan_ipc_skip[@]}" --extra "pkgconfig=$pkgconfig_ok" build/meson-logs/testlog.junit.xml \
  build-asan/meson-logs/testlog.junit.xml "${noleak[@]}" build-tsan/meson-logs/testlog.junit.xml \
  "${tsan_ipc_logs[@]}"
exit $status
