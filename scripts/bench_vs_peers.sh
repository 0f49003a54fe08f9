#!/usr/bin/env bash
# Chorus's all_reduce_perf and the peers of ../shared/peers (Gloo, Open MPI, MPICH, torch.distributed) side by
# side: the same float32-sum sweep through the same runner (runpeer.py waits for a quiet host and records foreign
# load), round after round. Within a round each rank count runs Chorus and every peer one after another, in an
# order that is reversed every other round and rotated every two, so no side always runs first or last on a
# machine whose speed drifts by tens of percent over minutes. Tables (scripts/peer_table.py): every side's median
# per size, and Chorus against the best peer at each size with both sides' spread.
#
# usage: scripts/bench_vs_peers.sh [OUTDIR]
# env:   NRANKS="2 4"  MAXBYTES=256M  RUNS=5  PEERS=<regex over peer names>  STAT=median|best
#        CHORUS_ENV="VAR=value ..." (extra environment for the Chorus runs; CHORUS_SHM_DISABLE=1 for TCP)
#        CHORUS_NAME (default chorus-shm, or chorus-tcp when CHORUS_ENV disables shm)
#        STREAM=1 (the default over TCP): one more side, tcp-stream (bench/tcp_stream: how fast the loopback
#        streams a ring allreduce's bytes with nothing reduced), shown beside Chorus in the --vs table
# e.g.   shm against the peers' shared-memory paths: PEERS='openmpi-vader|mpich-default' scripts/bench_vs_peers.sh
#        TCP against the TCP peers:  CHORUS_ENV=CHORUS_SHM_DISABLE=1 scripts/bench_vs_peers.sh
# needs: the peers' packages (see ../shared/peers/README.md) and a built tree (build/).
set -euo pipefail
cd "$(dirname "$0")/.."
top=$(pwd)
out=${1:-$top/build/peers-$(date +%Y%m%d-%H%M%S)}
NRANKS=${NRANKS:-"2 4"}
MAXBYTES=${MAXBYTES:-256M}
RUNS=${RUNS:-5}
STAT=${STAT:-median}
PEERS=${PEERS:-'gloo-ring$|gloo-ring_chunked|gloo-halving_doubling|openmpi-tcp|mpich-tcp|torch-gloo'}
case " ${CHORUS_ENV:-} " in
  *" CHORUS_SHM_DISABLE=1 "*) CHORUS_NAME=${CHORUS_NAME:-chorus-tcp} STREAM=${STREAM:-1} ;;
  *) CHORUS_NAME=${CHORUS_NAME:-chorus-shm} STREAM=${STREAM:-0} ;;
esac
# Every peer run_all.sh knows, in its order; the ones whose library is missing it skips itself.
known="gloo-ring gloo-ring_chunked gloo-halving_doubling gloo-bcube gloo-new_ring gloo-new_bcube openmpi-vader
       openmpi-tcp mpich-default mpich-tcp torch-gloo"
peers=()
for p in $known; do echo "$p" | grep -Eq "$PEERS" && peers+=("$p"); done
mkdir -p "$out"
rm -rf "$out/peers" && cp -r "$top/../shared/peers" "$out/peers" && rm -rf "$out/peers/results"
make -s -C "$out/peers" >/dev/null

side() {  # side NAME N: one sweep of Chorus or of one peer into the round's folder
  local name=$1 n=$2
  if [ "$name" = "$CHORUS_NAME" ]; then
    /usr/bin/python3 "$out/peers/runpeer.py" --out "$dir/$CHORUS_NAME-$n.txt" --timeout 600 \
      -- env ${CHORUS_ENV:-} "$top/build/scripts/chorusrun" -n "$n" --no-prefix \
      "$top/build/bench/all_reduce_perf" -a 1 -P 1 -z 1 -b 8 -e "$MAXBYTES" -f 2 -c 1 ||
      echo "failed: $CHORUS_NAME-$n (see $dir/$CHORUS_NAME-$n.txt)" >&2
  elif [ "$name" = tcp-stream ]; then
    /usr/bin/python3 "$out/peers/runpeer.py" --out "$dir/tcp-stream-$n.txt" --timeout 600 \
      -- "$top/build/bench/tcp_stream" -n "$n" -b 64K -e "$MAXBYTES" -f 2 ||
      echo "failed: tcp-stream-$n (see $dir/tcp-stream-$n.txt)" >&2
  else
    NRANKS="$n" PEERS="^$name\$" MAXBYTES="$MAXBYTES" REPEAT_PEERS= SKIP_BUILD=1 RESULTS_DIR="$dir" \
      bash "$out/peers/run_all.sh" >>"$dir/peers.log" 2>&1 || echo "failed: $name-$n (see $dir/peers.log)" >&2
  fi
}

. "$top/scripts/rotate.sh"
for run in $(seq 1 "$RUNS"); do
  dir="$out/run$run"
  mkdir -p "$dir"
  for n in $NRANKS; do
    jobs=("side $CHORUS_NAME $n")
    for p in "${peers[@]}"; do jobs+=("side $p $n"); done
    [ "$STREAM" = 1 ] && jobs+=("side tcp-stream $n")
    run_rotated "$run" "${jobs[@]}"
  done
done
/usr/bin/python3 "$top/scripts/peer_table.py" --stat "$STAT" "$out"/run*/
/usr/bin/python3 "$top/scripts/peer_table.py" --stat "$STAT" --vs "$CHORUS_NAME" --stream tcp-stream "$out"/run*/
echo "tables in $out"
