#!/usr/bin/env bash
# Runs on the GPU machine: nanprov installed as a user installs it (issue 49), into that machine's
# own torch environment (torch 2.11 with CUDA): `pip install --no-build-isolation .`; then the
# installed command, run from another folder with no build tree on PATH, finds the seed-004 cuDNN
# edge on the GPU, names its kernel and replays it; `pip uninstall` leaves nothing behind. The
# machine lacks sqlite3.h: it travels in .device/include. Logs go to $OUT.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${OUT:-$root/device-logs}"
mkdir -p "$out"
bin="$(dirname "$(command -v python3)")"
prefix="$(dirname "$bin")"
export PATH="$(echo "$PATH" | tr ':' '\n' | grep -v build-device | paste -sd:)"
start=$SECONDS
(cd "$root" && CMAKE_BUILD_PARALLEL_LEVEL="${NANPROV_INSTALL_JOBS:-8}" python3 -m pip install --no-build-isolation --no-deps \
  -Cbuild-dir=/tmp/nanprov-pip-build -Ccmake.define.SQLite3_INCLUDE_DIR="$root/.device/include" \
  -Ccmake.define.SQLite3_LIBRARY=/usr/lib/x86_64-linux-gnu/libsqlite3.so.0 . >"$out/pip-install.log" 2>&1)
echo "== pip install: exit $?, $((SECONDS - start)) s"
tail -2 "$out/pip-install.log"
ls -l "$bin/nanprov" "$prefix/lib/nanprov" "$prefix/share/nanprov"
cd "$(mktemp -d)" || exit 1
echo "== which nanprov: $(command -v nanprov)"
nanprov --version
nanprov doctor | head -24
nanprov run --out run-cudnn -- python3 "$root/examples/tiny_transformer.py" --device cuda --dtype bfloat16 --seq 64 \
  --d-model 256 --heads 2 --mask-rows --steps 3 2>&1 | tail -4
nanprov report run-cudnn | head -12
nanprov replay run-cudnn | head -12
python3 -m pip uninstall -y nanprov 2>&1 | tail -1
echo "== left behind: $(ls -d "$bin/nanprov" "$prefix/lib/nanprov" "$prefix/share/nanprov" 2>/dev/null | wc -l) paths"
