#!/usr/bin/env bash
# Builds here, with this machine's CUDA 13, everything scripts/gpu-check.sh runs on the GPU machine, into one folder
# the device tool can carry (under 64 MiB): the binaries in the build tree's layout (the tests find the plugins and
# fixtures by it), debug info stripped, and DIR/deps: every shared library they load that the GPU machine lacks
# (spdlog, fmt, libsodium, GoogleTest's, the C++ runtime). Then checks that ldd of every binary resolves with only
# DIR/deps, CUDA's libraries and the C library, and says what the folder weighs.
#
#   scripts/gpu-bundle.sh DIR [BUILD]   BUILD: a build folder with CUDA (default build-gpu; configured if missing)
#   then, on the GPU machine:  scripts/gpu-check.sh --bundle DIR
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: scripts/gpu-bundle.sh DIR [BUILD]" >&2; exit 2; }
dir=$1 b=${2:-build-gpu}
. scripts/gpu-targets.sh

command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
if [ ! -f "$b/build.ninja" ]; then
  meson setup "$b" -Dcuda=enabled -Dbuildtype=debugoptimized -Dwerror=true -Dmicrobench=disabled -Ducx=disabled \
    >/dev/null
fi
ninja -C "$b" "${gpu_targets[@]}" >/dev/null

rm -rf "$dir"
mkdir -p "$dir/deps"
dir_abs=$(cd "$dir" && pwd) b_abs=$(cd "$b" && pwd)
for t in "${gpu_targets[@]}"; do
  mkdir -p "$dir/$(dirname "$t")"
  cp "$b/$t" "$dir/$t"
  strip --strip-debug "$dir/$t"
done
# libchorus.so and whatever else of the build tree the binaries load by their RUNPATH ($ORIGIN-relative in a
# build tree), kept at the same relative place.
for t in "${gpu_targets[@]}"; do
  ldd "$b/$t" | awk -v b="$b_abs/" 'index($3, b) == 1 {print substr($3, length(b) + 1)}'
done | sort -u | while read -r rel; do
  mkdir -p "$dir/$(dirname "$rel")"
  cp "$b/$rel" "$dir/$rel"
  strip --strip-debug "$dir/$rel"
done

# What the GPU machine is taken to have: CUDA's own libraries, the driver, and the C library.
provided='^(linux-vdso|ld-linux-x86-64|libc|libm|libdl|libpthread|librt|libcuda|libcudart|libnvidia-[a-z-]*)\.so'
cuda_lib=$(dirname "$(find /usr/local/cuda*/ -name 'libcudart.so.13' -print -quit 2>/dev/null || true)")
for f in $(cd "$dir" && find . -type f ! -path './deps/*' | sed 's|^\./||'); do
  ldd "$dir/$f" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  grep -Eq "$provided" <<< "$name" && continue
  case "$path" in "$dir_abs"/*|"$b_abs"/*) continue ;; esac
  cp -L "$path" "$dir/deps/$name"
done

# Every binary resolves with only the bundle, CUDA and the C library.
bad=0
for f in $(cd "$dir" && find . -type f -perm -u+x ! -path './deps/*' | sed 's|^\./||'); do
  while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    if [ "$path" = "not" ]; then echo "gpu-bundle: $f: $name not found"; bad=1; continue; fi
    grep -Eq "$provided" <<< "$name" && continue
    case "$path" in "$dir_abs"/*) ;; *) echo "gpu-bundle: $f: $name comes from $path"; bad=1 ;; esac
  done < <(env -i LD_LIBRARY_PATH="$dir_abs/deps:$cuda_lib" /usr/bin/ldd "$dir/$f" 2>&1)
done
size=$(du -sm "$dir" | cut -f1)
echo "gpu-bundle: $dir: $(find "$dir" -type f | wc -l) files, ${size} MiB; deps: $(ls "$dir/deps" | tr '\n' ' ')"
[ "$size" -lt 64 ] || { echo "gpu-bundle: $size MiB is over the device tool's 64 MiB"; bad=1; }
exit $bad
