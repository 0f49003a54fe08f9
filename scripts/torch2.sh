#!/usr/bin/env bash
# torch 2.x for Chorus on Debian 12: a Debian 13 "trixie" root (python3-torch and libtorch-dev 2.6), made once and
# cached, and commands run inside it with this source tree at /src. The machine's own apt sources are never touched.
#
#   scripts/torch2.sh root            make the root if it is missing (~3.5 min, ~330 MB fetched, 1.6 GB on disk)
#   scripts/torch2.sh run CMD...      run CMD (bash -c) in the root, in /src; prints the root's path with `where`
#   scripts/torch2.sh where           the root's path
#
# The root lives in $CHORUS_TORCH2_ROOT (default: ~/.cache/chorus/trixie-torch2); a stamp names the package list it
# was made with, so a changed list makes it again. Everything mounted for a run (proc, the machine's /tmp and
# /dev/shm, the sources) lives in a private mount namespace and goes with it on every exit path, a kill included.
# The environment is cleared at the chroot but for a launcher's variables (RANK, ..., CHORUS_*, GLOO_*), so that
# none of the host's PYTHONPATH or LD_LIBRARY_PATH leaks in. USE_LIBUV=0: Debian's torch 2.6 is built without
# libuv, which TCPStore defaults to since 2.4.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
root=${CHORUS_TORCH2_ROOT:-$HOME/.cache/chorus/trixie-torch2}
pkgs=python3,python3-torch,libtorch-dev,pybind11-dev,python3-pytest,python3-numpy,python3-expecttest,g++,meson
pkgs+=,ninja-build,pkg-config,libspdlog-dev,libfmt-dev,libsodium-dev,procps,iproute2,git
stamp="$root/.chorus-root"

make_root() {
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$pkgs" ]; then return 0; fi
  [ "$(id -u)" -eq 0 ] || { echo "torch2.sh: making the root needs root (mmdebstrap --mode=root)" >&2; exit 1; }
  command -v mmdebstrap >/dev/null ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null; }
  # The mirror the machine itself uses (never a host name written here).
  local mirror
  mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  [ -n "$mirror" ] || mirror=$(awk '/^deb / {print $2; exit}' /etc/apt/sources.list)
  rm -rf "$root.new"
  mkdir -p "$(dirname "$root")"
  echo "torch2.sh: making the trixie root at $root (mirror $mirror)"
  local t0=$SECONDS
  unshare --mount --propagation private -- \
    mmdebstrap --mode=root --variant=apt --quiet --include="$pkgs" trixie "$root.new" "$mirror"
  rm -rf "$root"
  mv "$root.new" "$root"
  echo "$pkgs" > "$stamp"
  echo "torch2.sh: root made in $((SECONDS - t0)) s ($(du -sh "$root" | cut -f1))"
}

# What a launcher tells a rank (torchrun, scripts/netns-cluster) and the libraries' own settings cross into the root;
# nothing else of the host's environment does.
passed_env() {
  env | grep -E '^((RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|MASTER_ADDR|MASTER_PORT|CLUSTER_DIR|HOST_INDEX|HOST_ADDR)|(CHORUS|GLOO|TORCH|UCX)_[A-Z0-9_]*)=' || true
}

run_in_root() {
  [ -f "$stamp" ] || { echo "torch2.sh: no root at $root (scripts/torch2.sh root)" >&2; exit 1; }
  mkdir -p "$root/src"
  local vars=()
  mapfile -t vars < <(passed_env)
  # /tmp and /dev/shm are the machine's own, so processes in the root and out of it (separate runs of this
  # script: the ranks of scripts/netns-cluster) share files, stores and shared memory as any processes would; so
  # are /etc/hosts and /etc/resolv.conf, so that the machine's own name resolves (torchrun's MASTER_ADDR).
  # shellcheck disable=SC2016  # expanded by the inner shell
  exec unshare --mount --propagation private -- bash -c '
    set -e
    root=$1 top=$2 nvars=$3; shift 3
    vars=("${@:1:nvars}"); shift "$nvars"
    mount -t proc proc "$root/proc"
    mount --bind /dev/shm "$root/dev/shm"
    mount --bind /tmp "$root/tmp"
    for f in /etc/hosts /etc/resolv.conf; do [ -f "$f" ] && touch "$root$f" && mount --bind "$f" "$root$f"; done
    mount --bind "$top" "$root/src"
    exec chroot "$root" env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 USE_LIBUV=0 \
      TERM=dumb "${vars[@]}" bash -c "cd /src && $*"' bash "$root" "$top" "${#vars[@]}" "${vars[@]}" "$@"
}

case ${1:-} in
  root) make_root ;;
  run) shift; [ $# -gt 0 ] || { echo "usage: scripts/torch2.sh run CMD..." >&2; exit 2; }; run_in_root "$@" ;;
  where) echo "$root" ;;
  *) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
