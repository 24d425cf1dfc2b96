#!/usr/bin/env bash
# Runs on the GPU machine (see shared/GPU.md): builds nanprov against that machine's torch with
# ninja, runs the whole test suite there, then GPU end-to-end runs. Logs go to $OUT (the device
# tool's output folder) or ./device-logs. Headers that machine lacks (sqlite3.h) travel in
# .device/include, which git ignores: `mkdir -p .device/include && cp /usr/include/sqlite3.h
# .device/include/` before sending the tree.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${OUT:-$root/device-logs}"
mkdir -p "$out"
cd "$root"
py="$(command -v python3)"
prefix="$("$py" -c 'import torch; print(torch.utils.cmake_prefix_path)')"
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader | tee "$out/gpu.txt"
if ! cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_PREFIX_PATH="$prefix" \
    -DPython3_EXECUTABLE="$py" -DSQLite3_INCLUDE_DIR="$root/.device/include" \
    -DSQLite3_LIBRARY=/usr/lib/x86_64-linux-gnu/libsqlite3.so.0 >"$out/configure.log" 2>&1; then
  tail -40 "$out/configure.log"; exit 1
fi
grep "nanprov:" "$out/configure.log"
if ! cmake --build build-device -j 16 >"$out/build.log" 2>&1; then
  grep -m 30 -B2 -A6 "error" "$out/build.log"; exit 1
fi
(cd build-device && ctest -j 8 --timeout 600 --output-on-failure >"$out/ctest.log" 2>&1)
grep -E "tests passed|\*\*\*|Failed" "$out/ctest.log"

export PATH="$root/build-device/bin:$PATH"
nanprov doctor --python "$py" | tee "$out/doctor.txt"
train=(python3 examples/tiny_transformer.py --device cuda --dtype bfloat16 --seq 64 --d-model 256 --heads 2
       --mask-rows --steps 4)
# The seed-004 class: a bool padding mask with fully masked query rows, S=64, default dispatch.
nanprov run --out "$out/run-cudnn" -- "${train[@]}" 2>&1 | tail -15
nanprov report "$out/run-cudnn" --json >"$out/report-cudnn.json"
echo "report exit: $?"
nanprov calls "$out/run-cudnn" --nonfinite | head -8
# Control: the same run with cuDNN excluded from SDPA.
nanprov run --out "$out/run-control" -- "${train[@]}" --no-cudnn 2>&1 | tail -6
nanprov report "$out/run-control" >/dev/null
echo "control report exit: $?"
nanprov calls "$out/run-control" | head -4
