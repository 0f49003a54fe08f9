# Sourced by the one-command hardware checks (gpu-check.sh, rdma-check.sh): each step runs under a time limit with
# its log in $out/NAME.log, prints its tail and a summary line (also in $out/summary.txt), and counts in $fails.
# The caller sets $out (and creates it) and, optionally, $step_tail (lines of the log to print; 40).
: > "$out/summary.txt"
fails=0

step() {  # step NAME SECONDS COMMAND...
  local name=$1 limit=$2 t0=$SECONDS rc
  shift 2
  echo "== $name: $*"
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  rc=$?
  tail -n "${step_tail:-40}" "$out/$name.log"
  echo "-- $name: rc=$rc, $((SECONDS - t0)) s" | tee -a "$out/summary.txt"
  [ "$rc" -eq 0 ] || fails=$((fails + 1))
}
