#!/usr/bin/env bash
# Chorus's all_reduce_perf and the peers of ../shared/peers (Gloo, Open MPI, MPICH, torch.distributed) side by
# side in one run: the same float32-sum sweep, the same runner (runpeer.py waits for a quiet host and records
# foreign load), RUNS times each, then a table of the best run per size (scripts/peer_table.py).
#
# usage: scripts/bench_vs_peers.sh [OUTDIR]
# env:   NRANKS="2 4"  MAXBYTES=256M  RUNS=2  PEERS=<regex over peer names>
#        CHORUS_ENV="VAR=value ..." (extra environment for the Chorus runs; CHORUS_SHM_DISABLE=1 for TCP)
#        CHORUS_NAME (default chorus-shm, or chorus-tcp when CHORUS_ENV disables shm)
# e.g.   shm against the peers' shared-memory paths: PEERS='openmpi-vader|mpich-default' scripts/bench_vs_peers.sh
#        TCP against the TCP peers:  CHORUS_ENV=CHORUS_SHM_DISABLE=1 scripts/bench_vs_peers.sh
# needs: the peers' packages (see ../shared/peers/README.md) and a built tree (build/).
set -euo pipefail
cd "$(dirname "$0")/.."
top=$(pwd)
out=${1:-$top/build/peers-$(date +%Y%m%d-%H%M%S)}
NRANKS=${NRANKS:-"2 4"}
MAXBYTES=${MAXBYTES:-256M}
RUNS=${RUNS:-2}
PEERS=${PEERS:-'gloo-ring$|gloo-ring_chunked|gloo-halving_doubling|openmpi-tcp|mpich-tcp|torch-gloo'}
case " ${CHORUS_ENV:-} " in
  *" CHORUS_SHM_DISABLE=1 "*) CHORUS_NAME=${CHORUS_NAME:-chorus-tcp} ;;
  *) CHORUS_NAME=${CHORUS_NAME:-chorus-shm} ;;
esac
src=$top/../shared/peers
mkdir -p "$out"
rm -rf "$out/peers" && cp -r "$src" "$out/peers" && rm -rf "$out/peers/results"
make -s -C "$out/peers" >/dev/null
for run in $(seq 1 "$RUNS"); do
  mkdir -p "$out/run$run"
  for n in $NRANKS; do
    /usr/bin/python3 "$out/peers/runpeer.py" --out "$out/run$run/$CHORUS_NAME-$n.txt" --timeout 600 \
      -- env ${CHORUS_ENV:-} "$top/build/scripts/chorusrun" -n "$n" --no-prefix \
      "$top/build/bench/all_reduce_perf" -a 1 -P 1 -z 1 -b 8 -e "$MAXBYTES" -f 2 -c 1 || true
  done
  NRANKS="$NRANKS" PEERS="$PEERS" MAXBYTES="$MAXBYTES" REPEAT_PEERS= SKIP_BUILD=1 RESULTS_DIR="$out/run$run" \
    bash "$out/peers/run_all.sh" >"$out/run$run.log" 2>&1 || true
done
/usr/bin/python3 "$top/scripts/peer_table.py" "$out"/run*/
echo "tables in $out"
