#!/usr/bin/env bash
# Where apt works (this machine), fetches the Debian packages a Chorus build needs and a GPU machine lacks (spdlog,
# fmt, GoogleTest) and unpacks them into gpu-deps/ (git-ignored, about 5 MB), which scripts/gpu-check.sh uses
# there: carry it with the tree (the device tool's carry: ["gpu-deps"]).
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf gpu-deps
mkdir -p gpu-deps/debs
(cd gpu-deps/debs && apt-get download libspdlog-dev libspdlog1.10 libfmt-dev libfmt9 libgtest-dev libgmock-dev)
for d in gpu-deps/debs/*.deb; do dpkg -x "$d" gpu-deps; done
rm -rf gpu-deps/debs gpu-deps/usr/share/doc
du -sh gpu-deps
