#!/usr/bin/env bash
# Inside the trixie root (scripts/torch2.sh run scripts/torch2_test.sh): builds chorus_torch against torch 2.6 with
# g++ 14 (warnings are errors) and runs test/torch, writing build-trixie/torch2.junit.xml for the summary.
set -uo pipefail
cd "$(dirname "$0")/.."
opts=(-Dwerror=true -Dtests=false -Dmicrobench=disabled -Ducx=disabled -Dibverbs=disabled -Dcuda=disabled -Dtorch=enabled)
if [ -f build-trixie/build.ninja ]; then meson setup --reconfigure build-trixie "${opts[@]}" >/dev/null
else meson setup build-trixie "${opts[@]}" >/dev/null; fi || exit 1
ninja -C build-trixie >/dev/null || { ninja -C build-trixie -j1 | tail -40; exit 1; }
export PYTHONPATH=$PWD/build-trixie/ddp/torch:$PWD/test/torch CHORUS_SOCKET_IFNAME==lo CHORUS_TIMEOUT=120
python3 -m pytest -q -rs -p no:cacheprovider -W ignore --junitxml=build-trixie/torch2.junit.xml \
  -o junit_suite_name=torch2 test/torch
