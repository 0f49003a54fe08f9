#!/usr/bin/env bash
# A/B of two builds of Chorus, interleaved: 8 B latency and 1 / 16 / 256 MiB busbw of all_reduce_perf (blocking
# calls, -z 1) over shm and over tcp, for 2 and 4 ranks; round after round, A and B back to back at every point
# (A first in odd rounds, B first in even ones), so that both see the same machine. Prints the median of the rounds per build and the ratio B/A
# (scripts/ab_table.py).
#
# usage: scripts/bench_ab.sh BUILD_A BUILD_B [OUTDIR]     e.g. scripts/bench_ab.sh ../baseline/build build
# env:   RUNS=5  NRANKS="2 4"  SIZES="8 1M 16M 256M"  TRANSPORTS="shm tcp" (also ucxsm, ucxtcp: both builds need UCX)
#        Z="1": all_reduce_perf's -z values to run (1 blocking; 0 a stream, rows labelled TRANSPORTz0)
#        SMALL_ITERS=20000: sizes below 64 KiB run that many iterations (the adaptive mode's 1000 last a third of a
#        millisecond at 8 B, and one stolen time slice decides them); larger sizes run adaptively
set -euo pipefail
a=$(realpath "$1"); b=$(realpath "$2")
out=${3:-$(mktemp -d /tmp/bench-ab.XXXX)}
RUNS=${RUNS:-5}
NRANKS=${NRANKS:-"2 4"}
SIZES=${SIZES:-"8 1M 16M 256M"}
TRANSPORTS=${TRANSPORTS:-"shm tcp"}
SMALL_ITERS=${SMALL_ITERS:-20000}
Z=${Z:-1}
mkdir -p "$out"
for run in $(seq 1 "$RUNS"); do
  for n in $NRANKS; do
    for t in $TRANSPORTS; do
      # CHORUS_SHM_DISABLE works in both builds (the build before the transport registry has no CHORUS_TRANSPORTS).
      case $t in
        shm) env=() ;;
        tcp) env=(CHORUS_SHM_DISABLE=1) ;;
        ucxsm) env=(CHORUS_TRANSPORTS=ucx UCX_TLS=sm,self) ;;
        ucxtcp) env=(CHORUS_TRANSPORTS=ucx UCX_TLS=tcp,self UCX_NET_DEVICES=lo) ;;
        *) echo "bench_ab: unknown transport $t (shm tcp ucxsm ucxtcp)" >&2; exit 2 ;;
      esac
      for z in $Z; do
        label=$t; [ "$z" = 1 ] || label=${t}z$z
        for s in $SIZES; do
          iters=(-a 1)
          [ "$(numfmt --from=iec "$s")" -lt 65536 ] && iters=(-n "$SMALL_ITERS" -w 1000)
          order="A B"; [ $((run % 2)) = 0 ] && order="B A"
          for side in $order; do
            dir=$a; [ "$side" = B ] && dir=$b
            f="$out/$side-$label-$n-$s.run$run.txt"
            env "${env[@]}" CHORUS_PLUGIN_PATH="$dir/transports/ucx" "$dir/scripts/chorusrun" -n "$n" --no-prefix \
              "$dir/bench/all_reduce_perf" -z "$z" "${iters[@]}" -b "$s" -e "$s" -c 0 >"$f" 2>&1 || echo "failed: $f" >&2
          done
        done
      done
    done
  done
done
python3 "$(dirname "$0")/ab_table.py" "$out"
echo "raw tables in $out"
