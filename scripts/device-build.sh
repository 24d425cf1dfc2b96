# Sourced by the GPU-machine scripts: configures and builds nanprov against that machine's torch
# into build-device/ (ninja, 16 cores). Sets $root (the checkout, also the working directory),
# $out ($OUT, or ./device-logs) and $py, and puts the built nanprov on PATH. Returns non-zero on
# failure.
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${OUT:-$root/device-logs}"
mkdir -p "$out"
cd "$root"
export PATH="$root/build-device/bin:$PATH"
py="$(command -v python3)"
prefix="$("$py" -c 'import torch; print(torch.utils.cmake_prefix_path)')"
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader >"$out/gpu.txt"
# NANPROV_DEVICE_BUILT=1: already built by the caller (scripts/device-round.sh runs several
# scripts at once on one build).
if [ "${NANPROV_DEVICE_BUILT:-0}" != 1 ]; then
  if ! cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_PREFIX_PATH="$prefix" \
      -DPython3_EXECUTABLE="$py" -DSQLite3_INCLUDE_DIR="$root/.device/include" \
      -DSQLite3_LIBRARY=/usr/lib/x86_64-linux-gnu/libsqlite3.so.0 >"$out/configure.log" 2>&1; then
    tail -40 "$out/configure.log"; return 1
  fi
  grep "nanprov:" "$out/configure.log"
  # NANPROV_DEVICE_TARGETS: build only these (e.g. "nanprov nanprov_probes" for a benchmark), not
  # every test binary: a lease's minutes go further.
  if ! cmake --build build-device -j 16 ${NANPROV_DEVICE_TARGETS:+--target $NANPROV_DEVICE_TARGETS} >"$out/build.log" 2>&1; then
    grep -m 30 -B2 -A6 "error" "$out/build.log"; return 1
  fi
fi
