#!/usr/bin/env bash
# Small-message latency over UCX, interleaved: Chorus build A, Chorus build B and Open MPI with pml ucx, one
# fixed-length all_reduce_perf run each per round (blocking calls, -z 1), the order reversed every other round,
# so that all three see the same machine. Prints every round and the medians. Fixed iteration counts, not the
# adaptive mode: at 8 B its 1000 iterations last a third of a millisecond, and one stolen time slice decides them.
#
# usage: scripts/lat_ucx.sh BUILD_A BUILD_B      e.g. scripts/lat_ucx.sh ../before/build build
# env:   TLS=sm (or tcp)  NRANKS=2  SIZE=8  ITERS=100000  RUNS=6
set -euo pipefail
a=$(realpath "$1"); b=$(realpath "$2")
top=$(cd "$(dirname "$0")/.." && pwd)
tls=${TLS:-sm} n=${NRANKS:-2} size=${SIZE:-8} iters=${ITERS:-100000} runs=${RUNS:-6}
peers=$(mktemp -d /tmp/lat-ucx.XXXX)
cp -r "$top/../shared/peers/." "$peers" && make -s -C "$peers" mpi_bench_openmpi >/dev/null
over=(); [ "$n" -gt "$(nproc)" ] && over=(--oversubscribe)

chorus() {
  env CHORUS_TRANSPORTS=ucx UCX_TLS="$tls" UCX_NET_DEVICES=lo CHORUS_PLUGIN_PATH="$1/transports/ucx" \
    "$1/scripts/chorusrun" -n "$n" --no-prefix "$1/bench/all_reduce_perf" -P 1 -z 1 -c 1 -b "$size" -e "$size" \
    -n "$iters" -w 2000 | awk '$1 ~ /^[0-9]+$/ {print $5}'
}
ompi() {
  mpirun.openmpi --allow-run-as-root "${over[@]}" -np "$n" --mca oob_tcp_if_include lo --mca pml ucx \
    --mca pml_ucx_tls any --mca pml_ucx_devices any -x UCX_TLS="$tls,self" -x UCX_NET_DEVICES=lo \
    "$peers/mpi_bench_openmpi" -b "$size" -e "$size" -n "$iters" -w 2000 2>/dev/null | awk '$1 ~ /^[0-9]+$/ {print $5}'
}
A=() B=() O=()
for r in $(seq "$runs"); do
  if [ $((r % 2)) = 1 ]; then A+=("$(chorus "$a")"); B+=("$(chorus "$b")"); O+=("$(ompi)")
  else O+=("$(ompi)"); B+=("$(chorus "$b")"); A+=("$(chorus "$a")"); fi
  echo "round $r: A ${A[-1]} B ${B[-1]} openmpi-ucx ${O[-1]} us"
done
rm -rf "$peers"
python3 - "${A[*]}" "${B[*]}" "${O[*]}" "$tls" "$n" "$size" <<'EOF'
import statistics, sys
a, b, o = (statistics.median(float(x) for x in s.split()) for s in sys.argv[1:4])
print(f"UCX_TLS={sys.argv[4]} ranks={sys.argv[5]} {sys.argv[6]} B: median (us) A {a:.2f}  B {b:.2f}  "
      f"openmpi-ucx {o:.2f}  A/B {a / b:.2f}  openmpi/B {o / b:.2f} (> 1: B faster)")
EOF
