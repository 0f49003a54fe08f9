# Sourced by scripts/gpu-bundle.sh and scripts/gpu-check.sh: the build targets the GPU check runs, as paths in a
# build folder (the bundle keeps that layout).
gpu_targets=(test/test_cuda test/cuda_rank_matrix test/test_memory_spaces bench/all_reduce_perf bench/gpu/d2d_copy
             bench/gpu/stream_latency scripts/chorusrun scripts/chorus_info transports/cuda_ipc/libchorus-cuda_ipc.so
             test/fixtures/memory/libchorus-fakedev.so test/fixtures/memory/libchorus-memfuture.so
             test/fixtures/memory/libchorus-memshort.so)
