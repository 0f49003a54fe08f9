#!/usr/bin/env bash
# The check for a machine with an NVIDIA GPU, in one command bounded to 540 s, most informative steps first, each
# under its own deadline (timeout -k, so a hang is recorded as one and the next step runs):
#   preflight (GPU, driver, kernel, ldd) -> the device-stream hazards (kernel -> collective -> kernel on one CUDA
#   stream, memop and hostfn waits; CUDA_DEVICE_MAX_CONNECTIONS=1 refused) -> the collective matrix over device
#   buffers, 2 and 4 ranks, threads and processes -> performance (the device's copy rate, what a call on a stream
#   costs, all_reduce_perf -G 1 with device IPC by copy and by kernel and staged) -> one compute-sanitizer case ->
#   torch's gloo with CUDA tensors where torch has CUDA.
#
#   scripts/gpu-check.sh --bundle DIR   run from a bundle made here by scripts/gpu-bundle.sh (nothing to install)
#   scripts/gpu-check.sh                build on this machine first (the fallback: needs meson, ninja, the -dev
#                                       packages or gpu-deps/ from scripts/gpu-deps.sh)
#   --dry-run                           no GPU needed: prints the plan and its budget, checks every binary resolves
#                                       its libraries, and runs each step's command line briefly (a typo fails;
#                                       "no GPU" is expected)
#
# Logs go to $OUT (the device tool's) or gpu-check-out/, with summary.txt. The last line is the verdict:
#   gpu-check: PASS | FAIL (setup|hang|wrong|slow) STEPS...     exit 0 | 1 setup | 2 hang | 3 wrong | 4 slow
# slow: scripts/gpu_judge.py's targets (busbw against the bound from the copy rate measured in the same run, 8-byte
# latency), with its table in figures.md.
set -uo pipefail
cd "$(dirname "$0")/.."
bundle="" dry=0
while [ $# -gt 0 ]; do
  case $1 in
    --bundle) bundle=$(cd "$2" && pwd); shift 2 ;;
    --dry-run) dry=1; shift ;;
    *) echo "usage: scripts/gpu-check.sh [--bundle DIR] [--dry-run]" >&2; exit 1 ;;
  esac
done
out=${OUT:-$PWD/gpu-check-out}
mkdir -p "$out"
: > "$out/summary.txt"
. scripts/gpu-targets.sh
budget=540 planned=0 setup=() hung=() wrong=() slow=()

# step CLASS NAME SECONDS COMMAND...: CLASS says what a failure means (setup: the rest cannot be trusted; check:
# a finding). A step that runs past its deadline is a hang.
step() {
  local class=$1 name=$2 limit=$3 t0=$SECONDS rc
  shift 3
  planned=$((planned + limit))
  if [ "$dry" -eq 1 ]; then limit=20; fi
  echo "== $name (${limit} s): $*"
  timeout -k 5 "$limit" "$@" > "$out/$name.log" 2>&1
  rc=$?
  tail -n 25 "$out/$name.log"
  echo "-- $name: rc=$rc, $((SECONDS - t0)) s" | tee -a "$out/summary.txt"
  if [ "$dry" -eq 1 ]; then  # only a command that could not start at all is a finding here
    if [ "$rc" -eq 126 ] || [ "$rc" -eq 127 ]; then setup+=("$name"); fi
    return 0
  fi
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then hung+=("$name")
  elif [ "$rc" -ne 0 ] && [ "$class" = setup ]; then setup+=("$name")
  elif [ "$rc" -ne 0 ]; then wrong+=("$name"); fi
}

verdict() {
  echo "== summary"
  cat "$out/summary.txt"
  echo "planned: ${planned} s of ${budget} s"
  if [ ${#setup[@]} -gt 0 ]; then echo "gpu-check: FAIL (setup) ${setup[*]}"; exit 1; fi
  if [ ${#hung[@]} -gt 0 ]; then echo "gpu-check: FAIL (hang) ${hung[*]}"; exit 2; fi
  if [ ${#wrong[@]} -gt 0 ]; then echo "gpu-check: FAIL (wrong) ${wrong[*]}"; exit 3; fi
  if [ ${#slow[@]} -gt 0 ]; then echo "gpu-check: FAIL (slow) ${slow[*]} (figures.md)"; exit 4; fi
  if [ "$dry" -eq 1 ]; then echo "gpu-check: PASS (dry run: every command started; nothing was measured)"; exit 0; fi
  echo "gpu-check: PASS"
  exit 0
}

if [ -n "$bundle" ]; then
  b=$bundle
  export LD_LIBRARY_PATH=$b/deps${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
else
  b=build-gpu
  deps=$PWD/gpu-deps
  if ! pkg-config --exists spdlog fmt gtest gmock 2>/dev/null && [ -d "$deps/usr" ]; then
    export PKG_CONFIG_SYSROOT_DIR=$deps
    export PKG_CONFIG_PATH=$deps/usr/lib/x86_64-linux-gnu/pkgconfig:$deps/usr/share/pkgconfig
    export LD_LIBRARY_PATH=$deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  fi
  meson=$(command -v meson || ls ~/.local/bin/meson /usr/local/bin/meson 2>/dev/null | head -1 || true)
  [ -n "$meson" ] || { echo "gpu-check: FAIL (setup) no meson here: run scripts/gpu-bundle.sh where it builds"; exit 1; }
  step setup build 240 bash -c "{ [ -f $b/build.ninja ] || $meson setup $b -Dcuda=enabled -Dbuildtype=debugoptimized \
    -Dwerror=true -Dmicrobench=disabled -Ducx=disabled; } && ninja -C $b ${gpu_targets[*]}"
  [ ${#setup[@]} -eq 0 ] || verdict
fi
export TEST_BUILD_DIR=$b CHORUS_PLUGIN_PATH=$b/transports/cuda_ipc CHORUS_SOCKET_IFNAME==lo CHORUS_TIMEOUT=60

preflight() {
  nvidia-smi -L && nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.mem --format=csv
  uname -r
  local f bad=0
  for f in "${gpu_targets[@]}"; do
    [ -e "$b/$f" ] || { echo "missing: $b/$f"; bad=1; continue; }
    if ldd "$b/$f" | grep -q 'not found'; then ldd "$b/$f" | grep 'not found' | sed "s|^|$f: |"; bad=1; fi
  done
  return "$bad"
}
if [ "$dry" -eq 1 ]; then
  # nvidia-smi is absent here: the dry run checks the binaries only.
  step setup preflight 10 bash -c "$(declare -f preflight); b=$b dry=1; gpu_targets=(${gpu_targets[*]}); \
    nvidia-smi() { echo 'nvidia-smi: (dry run)'; }; preflight"
else
  step setup preflight 10 bash -c "$(declare -f preflight); b=$b dry=0; gpu_targets=(${gpu_targets[*]}); preflight"
fi
step setup chorus_info 15 "$b/scripts/chorus_info"
if [ "$dry" -eq 0 ] && ! grep -q "cuda from .*: registered" "$out/chorus_info.log"; then
  echo "-- the CUDA plugin did not register" | tee -a "$out/summary.txt"
  setup+=(cuda-plugin)
fi
[ ${#setup[@]} -eq 0 ] || verdict

# The hazards first: the device-stream path, with each way of holding the stream.
step check hazards 60 env CHORUS_CUDA_STREAM_WAIT=memop "$b/test/test_cuda" \
  --gtest_filter='CudaHazards.*:*CudaStreamOrder*:CudaApi.*'
step check hazards_hostfn 40 env CHORUS_CUDA_STREAM_WAIT=hostfn "$b/test/test_cuda" \
  --gtest_filter='CudaHazards.*:*CudaStreamOrder*'
step check one_connection 20 env CUDA_DEVICE_MAX_CONNECTIONS=1 "$b/test/test_cuda" \
  --gtest_filter='CudaHazards.OneHardwareQueue*'
# The collective matrix over device buffers: threads, then processes (CUDA IPC between them).
step check matrix_threads 100 "$b/test/test_cuda" --gtest_filter='Ranks/CudaMatrix.*'
step check matrix_processes 90 "$b/test/test_cuda" --gtest_filter='*CudaProcesses*'
# Performance: the device's own copy rate (the bound), a call on a stream, and all_reduce_perf with device buffers.
step check d2d_copy 15 "$b/bench/gpu/d2d_copy"
step check stream_latency 20 "$b/bench/gpu/stream_latency"
perf=("$b/scripts/chorusrun" -n 2 "$b/bench/all_reduce_perf" -G 1 -b 8 -e 256M -f 4 -z 1)
step check all_reduce_perf 45 "${perf[@]}"
step check all_reduce_perf_ipc_copy 30 env CHORUS_DEVICE_IPC_REDUCE=0 CHORUS_ALGO=RING "${perf[@]}"
step check all_reduce_perf_staged 30 env CHORUS_DEVICE_IPC=0 "${perf[@]}"
# Device IPC's chunks (Note [Device IPC chunks]) against the host transports' 1 MiB, where they differ.
step check all_reduce_perf_host_chunks 15 env CHORUS_CHUNK_BYTES=1M \
  "$b/scripts/chorusrun" -n 2 "$b/bench/all_reduce_perf" -G 1 -b 64M -e 256M -f 4 -z 1
if [ "$dry" -eq 0 ]; then
  python3 scripts/gpu_judge.py "$out" --ranks 2 | tee -a "$out/summary.txt"
  [ "${PIPESTATUS[0]}" -ne 4 ] || slow+=(figures)
else
  step check judge 5 python3 scripts/gpu_judge.py --help
fi
if command -v compute-sanitizer > /dev/null; then
  step check memcheck 45 env CHORUS_TEST_MATRIX=small compute-sanitizer --tool memcheck --error-exitcode 1 \
    "$b/test/test_cuda" --gtest_filter='Ranks/CudaMatrix.AllReduce*/0'
else
  planned=$((planned + 45))
  echo "-- memcheck: compute-sanitizer not found (CUDA's toolkit has it)" | tee -a "$out/summary.txt"
fi
if [ "$dry" -eq 0 ] && python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2> /dev/null
then
  step check gloo_cuda 30 python3 bench/gpu/gloo_cuda.py 8 16777216
else
  echo "-- gloo_cuda: no PyTorch with CUDA here" | tee -a "$out/summary.txt"
fi
[ "$planned" -le "$budget" ] || { echo "-- the plan takes ${planned} s, over ${budget} s"; setup+=(budget); }
verdict
