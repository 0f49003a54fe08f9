#!/usr/bin/env bash
# Issue 17's check where there are RDMA devices (InfiniBand or RoCE): one command, from a built tree.
#
#   scripts/rdma-check.sh                     one host: every pair through the port's own loopback
#   scripts/rdma-check.sh --hosts A,B         and across two hosts (run on A; the tree at the same path on both,
#        [--launcher mpirun|srun]             passwordless ssh to B for perftest; mpirun by default)
#        [--ranks-per-host N] [--port 29517]
#
# Steps (a summary line each in $out/summary.txt; the exit status is the number that failed):
#   1. devices: ibv_devinfo, and chorus_info's line for the plugin (which port a rank takes, and why not);
#   2. unit: the protocol engine, the selection policies and the queue pair bring-up (the tests that also run
#      without a device), and test_transports' Ibverbs.* (every pair over ibverbs on this host; bad CHORUS_IB_HCA
#      and CHORUS_IB_GID_INDEX named at creation);
#   3. conformance: the transport-dependent suites with CHORUS_TRANSPORTS=ibverbs, reported as NAME-ibverbs
#      (ranks of one process, each with its own queue pairs, through the loopback); failures-ibverbs kills ranks
#      and checks that the survivors name them within the liveness bound;
#   4. with --hosts: allreduce_check (600 cases) over 2 hosts with 1 and N ranks per host and 1 and 2 queue pairs
#      per peer, then all_reduce_perf for 2 ranks (one per host) from 8 B to 1 GiB, -z 1 and -z 0, printed next to
#      ib_send_lat and ib_write_bw (perftest) on the same port: the targets are 8 B within 1.5 us of
#      ib_send_lat, busbw >= 90 % of ib_write_bw from 1 MiB.
# Extra settings (CHORUS_IB_HCA, CHORUS_IB_GID_INDEX, ...) pass through from the environment to every rank.
set -uo pipefail
cd "$(dirname "$0")/.."
b=${BUILD:-build}
out=${OUT:-$PWD/rdma-check-out}
hosts="" launcher=mpirun per_host=4 port=29517
while [ $# -gt 0 ]; do
  case $1 in
    --hosts) hosts=$2; shift 2 ;;
    --launcher) launcher=$2; shift 2 ;;
    --ranks-per-host) per_host=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    *) echo "rdma-check: unknown argument $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
step_tail=25
. scripts/check_steps.sh

[ -f "$b/transports/ibverbs/libchorus-ibverbs.so" ] || {
  echo "rdma-check: $b has no ibverbs plugin (install libibverbs-dev, then meson setup $b && ninja -C $b)"; exit 1; }
ibv_devinfo -l || true
"$b/scripts/chorus_info" | grep -E '^  (ibverbs|shm|tcp) ' | tee "$out/chorus_info.txt"
if grep -q '^  ibverbs  n/a' "$out/chorus_info.txt"; then
  echo "rdma-check: the ibverbs transport cannot run here: $(grep '^  ibverbs' "$out/chorus_info.txt")"; exit 1
fi

# 2. Unit tests, and Ibverbs.* (which runs instead of skipping where a device is).
step unit 600 meson test -C "$b" --print-errorlogs ibverbs_engine ibverbs_policy ibverbs_qp \
  transports --test-args='--gtest_filter=Ibverbs.*'

# 3. The conformance suites over ibverbs.
for suite in smoke collectives alltoallv errors runtime_errors comm_split tagged streams ddp failures; do
  step "$suite-ibverbs" 1800 env CHORUS_TRANSPORTS=ibverbs meson test -C "$b" --print-errorlogs "$suite"
done

if [ -n "$hosts" ]; then
  a=${hosts%%,*} peer=${hosts##*,}
  # $out/launch.sh RANKS_PER_HOST PROGRAM ARGS...: the program on both hosts, every CHORUS_* variable passed on.
  cat > "$out/launch.sh" <<EOF
#!/usr/bin/env bash
n=\$1; shift
export CHORUS_ROOT=$a:$port CHORUS_TRANSPORTS=ibverbs
if [ $launcher = srun ]; then exec srun -N 2 --ntasks-per-node=\$n --export=ALL "\$@"; fi
xs=(); for v in \$(env | grep -o '^CHORUS_[A-Z_]*' | sort -u); do xs+=(-x "\$v"); done
exec mpirun -H $a:\$n,$peer:\$n -np \$((2 * n)) "\${xs[@]}" "\$@"
EOF
  chmod +x "$out/launch.sh"
  # 4. Correctness across the hosts, then speed next to perftest.
  for n in 1 "$per_host"; do
    for q in 1 2; do
      step "allreduce_check-${n}x2-qps$q" 600 env CHORUS_IB_QPS_PER_PEER=$q "$out/launch.sh" "$n" \
        "$PWD/$b/test/allreduce_check"
    done
  done
  for z in 1 0; do
    step "all_reduce_perf-z$z" 900 "$out/launch.sh" 1 "$PWD/$b/bench/all_reduce_perf" -b 8 -e 1G -f 2 -z "$z"
  done
  dev=${CHORUS_IB_HCA:-$(ibv_devinfo -l | sed -n '2{s/^[[:space:]]*//;p}')}
  dev=${dev#^}; dev=${dev#=}; dev=${dev%%,*}; ibport=1
  [[ $dev == *:* ]] && { ibport=${dev#*:}; dev=${dev%%:*}; }
  gidx=()
  [ -n "${CHORUS_IB_GID_INDEX:-}" ] && gidx=(-x "$CHORUS_IB_GID_INDEX")
  for t in ib_send_lat ib_write_bw; do
    if ! command -v "$t" > /dev/null; then
      echo "-- $t: not installed (apt install perftest)" | tee -a "$out/summary.txt"; fails=$((fails + 1)); continue
    fi
    ssh "$peer" "$t -d $dev -i $ibport ${gidx[*]} -a -F --report_gbits" > "$out/$t-server.log" 2>&1 &
    sleep 2
    step "$t" 300 "$t" -d "$dev" -i "$ibport" "${gidx[@]}" -a -F --report_gbits "$peer"
    wait
  done
  # Side by side: Chorus's blocking all_reduce_perf (time, busbw) against ib_send_lat's typical latency and
  # ib_write_bw's average bandwidth at the same size.
  python3 - "$out" <<'EOF' | tee "$out/table.md"
import re, sys
out = sys.argv[1]
def rows(path, size_col, cols):
    got = {}
    try:
        for line in open(path):
            f = line.split()
            if len(f) > max(cols) and re.fullmatch(r"\d+", f[size_col]):
                got[int(f[size_col])] = [float(f[c]) for c in cols]
    except OSError:
        pass
    return got
chorus = rows(f"{out}/all_reduce_perf-z1.log", 0, [5, 7])   # time us, busbw GB/s
lat = rows(f"{out}/ib_send_lat.log", 0, [4])                 # t_typical us
bw = rows(f"{out}/ib_write_bw.log", 0, [3])                  # BW average, Gb/s
print("| bytes | Chorus us | ib_send_lat us | Chorus busbw GB/s | ib_write_bw GB/s | busbw / write bw |")
print("|---|---|---|---|---|---|")
for size in sorted(chorus):
    t, busbw = chorus[size]
    l = f"{lat[size][0]:.2f}" if size in lat else "-"
    w = bw[size][0] / 8 if size in bw else None
    print(f"| {size} | {t:.2f} | {l} | {busbw:.2f} | {w:.2f} | {busbw / w:.2f} |" if w else
          f"| {size} | {t:.2f} | {l} | {busbw:.2f} | - | - |")
EOF
fi
echo "rdma-check: $fails step(s) failed; logs in $out"
exit "$fails"
