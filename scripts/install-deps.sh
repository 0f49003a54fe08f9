#!/usr/bin/env bash
# Installs, with apt, whatever Chorus needs to build and test that is missing (Debian 12, as root).
set -euo pipefail
pkgs=(meson ninja-build pkg-config g++ libgtest-dev libgmock-dev libbenchmark-dev libspdlog-dev libfmt-dev
      libsodium-dev  # connections' and heartbeats' MACs (Note [Authentication])
      clang-14 libclang-rt-14-dev  # the libFuzzer targets (scripts/fuzz.sh)
      libucx-dev ucx-utils  # the UCX transport plugin
      libibverbs-dev  # the ibverbs transport plugin
      iproute2 iptables libnetfilter-queue-dev  # scripts/netns-cluster (simulated hosts)
      libtorch-dev pybind11-dev python3-torch python3-pytest)  # chorus_torch, the torch.distributed backend
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then echo "need root to apt-get install ${missing[*]}" >&2; exit 1; fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
