#!/usr/bin/env bash
# The simulated-cluster comparison: allreduce float32 sum on H hosts of scripts/netns-cluster (one rank each,
# links shaped to RATE with DELAY_MS one-way delay) for every H in HOSTS: Chorus with CHORUS_ALGO=RING, TREE
# and AUTO, Gloo's ring and halving-doubling from ../shared/peers on the same namespaces, and the cost model the
# communicator built there (chorus_info --comm, model-H.txt), RUNS times each; then the tables and PNG of
# scripts/plot_bench.py and the model check of scripts/validate_model.py. Needs root (exits 77 otherwise) and a
# built tree (build/).
#
# usage: sudo scripts/bench_cluster.sh [OUTDIR]
# env:   HOSTS="8" RATE=1gbit DELAY_MS=0.5 MAXBYTES=64M RUNS=1 ALGOS="RING TREE AUTO" GLOO="ring halving_doubling"
#        e.g. the model check at 2-8 hosts: HOSTS="2 4 8" ALGOS="RING TREE" GLOO= MAXBYTES=4M
set -euo pipefail
cd "$(dirname "$0")/.."
top=$(pwd)
out=${1:-$top/build/cluster-$(date +%Y%m%d-%H%M%S)}
HOSTS=${HOSTS:-8} RATE=${RATE:-1gbit} DELAY_MS=${DELAY_MS:-0.5} MAXBYTES=${MAXBYTES:-64M} RUNS=${RUNS:-1}
ALGOS=${ALGOS:-"RING TREE AUTO"} GLOO=${GLOO-"ring halving_doubling"}
if [ "$(id -u)" != 0 ]; then echo "bench_cluster: SKIP: needs root (network namespaces)"; exit 77; fi
mkdir -p "$out"

# Gloo binds to 127.0.0.1 in ../shared/peers; this copy binds to the host's address instead (GLOO_HOSTNAME).
if [ -n "$GLOO" ]; then
  rm -rf "$out/peers" && cp -r "$top/../shared/peers" "$out/peers" && rm -rf "$out/peers/results"
  sed -i 's|attr.hostname = "127.0.0.1";.*|attr.hostname = getenv("GLOO_HOSTNAME") ? getenv("GLOO_HOSTNAME") : "127.0.0.1";|' \
    "$out/peers/gloo_bench.cc"
  grep -q GLOO_HOSTNAME "$out/peers/gloo_bench.cc" || { echo "bench_cluster: could not patch gloo_bench.cc" >&2; exit 1; }
  make -s -C "$out/peers" gloo_bench
fi

for run in $(seq 1 "$RUNS"); do
  mkdir -p "$out/run$run"
  for h in $HOSTS; do
    cluster=("$top/scripts/netns-cluster" -k "$h" --rate "$RATE" --delay-ms "$DELAY_MS" --timeout 1800 --)
    "${cluster[@]}" "$top/build/scripts/chorus_info" --comm >"$out/run$run/model-$h.txt" 2>&1 || true
    for algo in $ALGOS; do
      echo "run $run, $h hosts: chorus $algo"
      "${cluster[@]}" env CHORUS_ALGO="$algo" "$top/build/bench/all_reduce_perf" -a 1 -P 1 -z 1 -c 1 \
        -b 8 -e "$MAXBYTES" -f 2 >"$out/run$run/chorus-$algo-$h.txt" 2>"$out/run$run/chorus-$algo-$h.err" || true
    done
    for algo in $GLOO; do
      echo "run $run, $h hosts: gloo $algo"
      "${cluster[@]}" sh -c 'mkdir -p "$CLUSTER_DIR/store"
        GLOO_HOSTNAME=$HOST_ADDR exec "$0" -A "$1" -p "$WORLD_SIZE" -r "$RANK" -s "$CLUSTER_DIR/store" -b 8 -e "$2" -f 2' \
        "$out/peers/gloo_bench" "$algo" "$MAXBYTES" >"$out/run$run/gloo-$algo-$h.txt" \
        2>"$out/run$run/gloo-$algo-$h.err" || true
    done
  done
done
for h in $HOSTS; do
  mkdir -p "$out/by-hosts/$h"
  for f in "$out"/run*/*-"$h".txt; do
    r=$(basename "$(dirname "$f")")
    mkdir -p "$out/by-hosts/$h/$r" && cp "$f" "$out/by-hosts/$h/$r/"
  done
  /usr/bin/python3 "$top/scripts/plot_bench.py" --title "allreduce float32, $h hosts x 1 rank, $RATE, $DELAY_MS ms" \
    --png "$out/cluster-$h.png" "$out/by-hosts/$h"/run*/
done
/usr/bin/python3 "$top/scripts/validate_model.py" "$out"/run*/
echo "results in $out"
