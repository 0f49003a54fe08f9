#!/usr/bin/env bash
# DDP overlap on a simulated 2-host cluster (scripts/netns-cluster): chorus_ddp_train with and without overlap
# and over a bucket-cap sweep, one line per run (median step, backward, communication, exposed, hidden), plus a
# Chrome trace of one overlapped run rendered to PNG (scripts/plot_trace.py).
#
# usage: scripts/bench_ddp.sh [OUTDIR]          (needs root for the namespaces; a built tree in build/)
# env:   HOSTS=2 RATE=1gbit DELAY_MS= CAPS="1 5 25 100" STEPS=8
#        MODEL="--layers 8 --width 1024 --features 64 --classes 10 --batch 256"
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/ddp-bench-$(date +%Y%m%d-%H%M%S)}
HOSTS=${HOSTS:-2}
RATE=${RATE:-1gbit}
CAPS=${CAPS:-"1 5 25 100"}
STEPS=${STEPS:-8}
MODEL=${MODEL:-"--layers 8 --width 1024 --features 64 --classes 10 --batch 256"}
mkdir -p "$out"
net=(scripts/netns-cluster -k "$HOSTS" --rate "$RATE")
[ -n "${DELAY_MS:-}" ] && net+=(--delay-ms "$DELAY_MS")
train=(build/ddp/trainer/chorus_ddp_train --steps "$STEPS" $MODEL)

run() {  # run NAME ARGS...: the trainer's output in $out/NAME.txt, its summary line on stdout
  local name=$1
  shift
  "${net[@]}" -- "${train[@]}" "$@" >"$out/$name.txt" 2>&1 || { echo "$name failed: see $out/$name.txt"; return 1; }
  printf '%-22s %s\n' "$name" "$(grep '^# median' "$out/$name.txt" | sed 's/^# median //')"
}

echo "# $HOSTS hosts at $RATE${DELAY_MS:+, ${DELAY_MS} ms delay}; $MODEL; $STEPS steps (medians over steps 2..)"
for cap in $CAPS; do
  run "cap${cap}-overlap" --bucket-cap-mb "$cap"
  run "cap${cap}-no-overlap" --bucket-cap-mb "$cap" --no-overlap
done
best=$(for cap in $CAPS; do grep '^# median' "$out/cap${cap}-overlap.txt" | awk -v c="$cap" '{print $4, c}'; done |
       sort -n | head -1 | cut -d' ' -f2)
run "trace-cap${best}" --bucket-cap-mb "$best" --trace "$out/trace.json"
/usr/bin/python3 scripts/plot_trace.py "$out/trace.json" "$out/trace.png" --last-steps 2 && echo "trace: $out/trace.png"
echo "results in $out"
