#!/usr/bin/env bash
# Chorus over UCX side by side with Open MPI over the same UCX (--mca pml ucx), with Chorus's own shm and tcp
# transports, and with ucx_perftest's tagged bandwidth (the transport's ceiling, 2 processes), for each UCX_TLS
# in TLS and each rank count in NRANKS: float32-sum allreduce sweeps with blocking calls (-z 1), round after
# round, every program once per round, in an order that rotates from round to round. Tables: scripts/peer_table.py over the rounds (the best run per
# size) and scripts/ucx_table.py (medians, ratios and the targets of the UCX issue). Stage "hosts": Chorus over
# UCX (UCX_TLS=tcp) and over its own tcp across 2 simulated hosts of scripts/netns-cluster (RATE, DELAY_MS;
# needs root), in the same rounds.
#
# usage: scripts/bench_ucx.sh [OUTDIR]
# env:   STAGES="local hosts"  TLS="tcp sm"  NRANKS="2 4"  MAXBYTES=256M  RUNS=3
#        PERFTEST_SIZES="64K 1M 16M 64M 256M"  RATE=1gbit  DELAY_MS=0.5  HOSTS_MAXBYTES=64M
# needs: a built tree (build/, with the UCX plugin), openmpi-bin + libopenmpi-dev, ucx-utils.
set -euo pipefail
cd "$(dirname "$0")/.."
top=$(pwd)
out=${1:-$top/build/ucx-$(date +%Y%m%d-%H%M%S)}
TLS=${TLS:-"tcp sm"}
NRANKS=${NRANKS:-"2 4"}
MAXBYTES=${MAXBYTES:-256M}
RUNS=${RUNS:-3}
PERFTEST_SIZES=${PERFTEST_SIZES:-"64K 1M 16M 64M 256M"}
STAGES=${STAGES:-"local hosts"}
RATE=${RATE:-1gbit} DELAY_MS=${DELAY_MS:-0.5} HOSTS_MAXBYTES=${HOSTS_MAXBYTES:-64M}
if [[ " $STAGES " == *" hosts "* && "$(id -u)" != 0 ]]; then
  echo "bench_ucx: the hosts stage needs root (network namespaces); skipped" >&2
  STAGES=${STAGES//hosts/}
fi
mkdir -p "$out"
rm -rf "$out/peers" && cp -r "$top/../shared/peers" "$out/peers" && rm -rf "$out/peers/results"
make -s -C "$out/peers" mpi_bench_openmpi >/dev/null
sweep=(-b 8 -e "$MAXBYTES" -f 2)
cores=$(nproc)

chorus() {  # chorus NAME N ENV... : one Chorus sweep into the current round's folder
  local name=$1 n=$2; shift 2
  timeout 900 env "$@" "$top/build/scripts/chorusrun" -n "$n" --no-prefix \
    "$top/build/bench/all_reduce_perf" -a 1 -P 1 -z 1 -c 1 "${sweep[@]}" >"$dir/$name-$n.txt" 2>&1 ||
    echo "failed: $name-$n (see $dir/$name-$n.txt)" >&2
}

ompi_ucx() {  # ompi_ucx TLS N
  local tls=$1 n=$2 over=()
  [ "$n" -gt "$cores" ] && over=(--oversubscribe)
  timeout 900 mpirun.openmpi --allow-run-as-root "${over[@]}" -np "$n" --mca oob_tcp_if_include lo \
    --mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any \
    -x UCX_TLS="$tls,self" -x UCX_NET_DEVICES=lo \
    "$out/peers/mpi_bench_openmpi" -A "openmpi-ucx-$tls" "${sweep[@]}" >"$dir/openmpi-ucx-$tls-$n.txt" 2>&1 ||
    echo "failed: openmpi-ucx-$tls-$n (see $dir/openmpi-ucx-$tls-$n.txt)" >&2
}

perftest() {  # perftest TLS: ucx_perftest tag_bw between 2 processes, one line per size
  local tls=$1 port=$((20000 + RANDOM % 20000)) f="$dir/perftest-$1.txt"
  : >"$f"
  for s in $PERFTEST_SIZES; do
    local bytes
    bytes=$(numfmt --from=iec "$s")
    UCX_TLS="$tls,self" UCX_NET_DEVICES=lo ucx_perftest -p "$port" >/dev/null 2>&1 &
    local server=$!
    sleep 0.5
    local line
    line=$(UCX_TLS="$tls,self" UCX_NET_DEVICES=lo timeout 120 ucx_perftest 127.0.0.1 -p "$port" -t tag_bw \
             -s "$bytes" -n $((bytes >= 64 << 20 ? 20 : 200)) 2>&1 | grep -E "^ *Final:" | tail -1 || true)
    wait "$server" 2>/dev/null || true
    # Final: iterations, latency typical/avg/overall, bandwidth average/overall (MB/s), msgrate ...
    echo "$bytes $(echo "$line" | awk '{print $(NF-2)}')" >>"$f"
    port=$((port + 1))
  done
}

hosts() {  # hosts NAME ENV...: one sweep across 2 simulated hosts, one rank each
  local name=$1; shift
  "$top/scripts/netns-cluster" -k 2 --rate "$RATE" --delay-ms "$DELAY_MS" --timeout 1800 -- env "$@" \
    "$top/build/bench/all_reduce_perf" -a 1 -P 1 -z 1 -c 1 -b 8 -e "$HOSTS_MAXBYTES" -f 2 \
    >"$dir/hosts-$name-2.txt" 2>&1 || echo "failed: hosts-$name-2 (see $dir/hosts-$name-2.txt)" >&2
}

. "$top/scripts/rotate.sh"
for run in $(seq 1 "$RUNS"); do
  dir="$out/run$run"
  mkdir -p "$dir"
  if [[ " $STAGES " == *" hosts "* ]]; then
    hosts chorus-tcp CHORUS_TRANSPORTS=tcp
    hosts chorus-ucx CHORUS_TRANSPORTS=ucx UCX_TLS=tcp UCX_NET_DEVICES=eth0
  fi
  [[ " $STAGES " == *" local "* ]] || continue
  for n in $NRANKS; do
    jobs=("chorus chorus-shm $n" "chorus chorus-tcp $n CHORUS_SHM_DISABLE=1")
    for tls in $TLS; do
      jobs+=("chorus chorus-ucx-$tls $n CHORUS_TRANSPORTS=ucx UCX_TLS=$tls UCX_NET_DEVICES=lo" "ompi_ucx $tls $n")
    done
    run_rotated "$run" "${jobs[@]}"
  done
  for tls in $TLS; do perftest "$tls"; done
done
python3 "$top/scripts/ucx_table.py" "$out"/run*/
echo "tables in $out"
