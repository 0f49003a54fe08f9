# Sourced by the side-by-side benchmarks (bench_vs_peers.sh, bench_ucx.sh).
# run_rotated RUN JOB...: runs every JOB (a command line of words) once, in an order that is reversed every other
# round and rotated by one every two, so that no program always runs first or last on a machine whose speed
# drifts by tens of percent over minutes (where a program ran in a round moved its busbw by up to 2x over tcp:
# docs/ucx-results.md).
run_rotated() {
  local run=$1
  shift
  local jobs=("$@") k=$# off=$(((run - 1) / 2)) i j job
  for ((i = 0; i < k; i++)); do
    j=$(((i + off) % k))
    [ $((run % 2)) = 0 ] && j=$(((k - 1 - i + off) % k))
    read -r -a job <<<"${jobs[$j]}"
    "${job[@]}"
  done
}
