#!/usr/bin/env bash
# Issue 14's check on a machine with an NVIDIA GPU: one command, under 10 minutes. Builds Chorus with CUDA, then
#   1. chorus_info: the CUDA plugin registered;
#   2. test_cuda: the collective matrix over device buffers for 2 and 4 ranks sharing the GPU, as threads and as
#      processes (CUDA IPC between them; also with the copy engine instead of the reduce kernel, and staged through
#      host memory) (every collective, datatype and op, odd counts, in place, roots), kernel -> collective -> kernel on one CUDA stream with the host
#      not blocking, chorusMemAlloc; again with CHORUS_CUDA_STREAM_WAIT=hostfn; test_memory_spaces (the seam);
#   3. compute-sanitizer memcheck and racecheck over a small run;
#   4. what a call on a CUDA stream costs (memop and hostfn), the device's own copy rate, all_reduce_perf with
#      device buffers for 2 ranks from 8 B to 1 GiB (-z 1 and -z 0; and, blocking, the ring's reducing steps by the
#      copy engine instead of the reduce kernel reading the peer's buffer, and staged through host memory instead
#      of CUDA IPC), and torch.distributed's gloo with CUDA tensors.
# Logs go to $OUT (the device tool's) or gpu-check-out/, a summary line per step to summary.txt; the exit status
# is the number of steps that failed. Where spdlog, fmt or GoogleTest are missing (the GPU machine has no -dev
# packages), it uses gpu-deps/, unpacked where apt works by scripts/gpu-deps.sh and carried with the tree.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/gpu-check-out}
mkdir -p "$out"
. scripts/check_steps.sh

nvidia-smi -L || { echo "gpu-check: no NVIDIA GPU (nvidia-smi failed)"; exit 1; }
nvcc --version | tail -n 2

deps=$PWD/gpu-deps
if ! pkg-config --exists spdlog fmt gtest gmock 2>/dev/null; then
  if [ ! -d "$deps/usr" ]; then
    echo "gpu-check: spdlog/fmt/gtest are missing and there is no gpu-deps/ (run scripts/gpu-deps.sh where apt works)"
    exit 1
  fi
  export PKG_CONFIG_SYSROOT_DIR=$deps
  export PKG_CONFIG_PATH=$deps/usr/lib/x86_64-linux-gnu/pkgconfig:$deps/usr/share/pkgconfig
  export LD_LIBRARY_PATH=$deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi

b=build-gpu
targets=(test/test_cuda test/cuda_rank_matrix test/test_memory_spaces bench/all_reduce_perf bench/gpu/d2d_copy bench/gpu/stream_latency
         scripts/chorusrun scripts/chorus_info transports/cuda_ipc/libchorus-cuda_ipc.so
         test/fixtures/memory/libchorus-fakedev.so test/fixtures/memory/libchorus-memfuture.so
         test/fixtures/memory/libchorus-memshort.so)
step build 300 bash -c "{ [ -f $b/build.ninja ] || meson setup $b -Dcuda=enabled -Dbuildtype=debugoptimized -Dwerror=true \
  -Dmicrobench=disabled -Ducx=disabled; } && ninja -C $b -j$(nproc) ${targets[*]}"
if [ "$fails" -ne 0 ]; then echo "gpu-check: the build failed"; exit 1; fi

export TEST_BUILD_DIR=$PWD/$b CHORUS_SOCKET_IFNAME==lo CHORUS_TIMEOUT=120
step chorus_info 30 "$b/scripts/chorus_info"
grep -q "cuda from .*: registered" "$out/chorus_info.log" || { echo "-- the CUDA plugin did not register"; fails=$((fails + 1)); }
step test_cuda 300 "$b/test/test_cuda"
step test_cuda_hostfn 120 env CHORUS_CUDA_STREAM_WAIT=hostfn "$b/test/test_cuda" --gtest_filter='*Stream*'
step test_memory_spaces 300 "$b/test/test_memory_spaces"
small='Ranks/CudaMatrix.AllReduce*/0:Ranks/CudaStreamOrder.*/0:CudaApi.*'
if command -v compute-sanitizer > /dev/null; then
  step memcheck 240 env CHORUS_TEST_MATRIX=small compute-sanitizer --tool memcheck --error-exitcode 1 \
    "$b/test/test_cuda" --gtest_filter="$small"
  step racecheck 240 env CHORUS_TEST_MATRIX=small compute-sanitizer --tool racecheck --error-exitcode 1 \
    "$b/test/test_cuda" --gtest_filter='Ranks/CudaMatrix.AllReduce*/0'
else
  echo "-- compute-sanitizer: not found" | tee -a "$out/summary.txt"
  fails=$((fails + 1))
fi
step stream_latency_memop 60 env CHORUS_CUDA_STREAM_WAIT=memop "$b/bench/gpu/stream_latency"
step stream_latency_hostfn 60 env CHORUS_CUDA_STREAM_WAIT=hostfn "$b/bench/gpu/stream_latency"
step d2d_copy 60 "$b/bench/gpu/d2d_copy"
step all_reduce_perf_z1 180 "$b/scripts/chorusrun" -n 2 "$b/bench/all_reduce_perf" -G 1 -b 8 -e 1G -f 4 -z 1
step all_reduce_perf_z0 180 "$b/scripts/chorusrun" -n 2 "$b/bench/all_reduce_perf" -G 1 -b 8 -e 1G -f 4 -z 0
step all_reduce_perf_ipc_copy 180 env CHORUS_DEVICE_IPC_REDUCE=0 CHORUS_ALGO=RING "$b/scripts/chorusrun" -n 2 \
  "$b/bench/all_reduce_perf" -G 1 -b 8 -e 1G -f 4 -z 1
step all_reduce_perf_ipc_kernel 180 env CHORUS_ALGO=RING "$b/scripts/chorusrun" -n 2 \
  "$b/bench/all_reduce_perf" -G 1 -b 8 -e 1G -f 4 -z 1
step all_reduce_perf_staged 180 env CHORUS_DEVICE_IPC=0 "$b/scripts/chorusrun" -n 2 "$b/bench/all_reduce_perf" \
  -G 1 -b 8 -e 1G -f 4 -z 1
if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2> /dev/null; then
  step gloo_cuda 240 python3 bench/gpu/gloo_cuda.py 8 268435456
else
  echo "-- gloo_cuda: no PyTorch with CUDA here" | tee -a "$out/summary.txt"
fi
echo "== summary"
cat "$out/summary.txt"
echo "gpu-check: $fails step(s) failed"
exit "$fails"
