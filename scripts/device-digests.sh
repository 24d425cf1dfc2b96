#!/usr/bin/env bash
# Runs on the GPU machine: the replica digests (issue 64) taken by the gradient sentinel's dense
# check on the way. The dense check's word sums against the host's (gtest), 3 DDP ranks on one GPU
# (gloo) where rank 1 flips a bit at step 4 and a clean control (as the CPU e2e tests, on CUDA
# parameters), and the digests' cost side by side on the GPU-bound model under one-rank DDP.
# Logs go to $OUT (the device tool's output folder) or ./device-logs.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/device-build.sh" || exit 1

(cd build-device && ctest -R "DenseCheck|SentinelDigests|Gpu.GradientSentinel" --output-on-failure 2>&1 \
  | grep -E "tests passed|\*\*\*|Failure|Expected|Which is" | head -20)
ddp() {
  local name="$1"; shift
  GLOO_SOCKET_IFNAME=lo nanprov run --out "$out/$name" -- torchrun --standalone --nproc-per-node=3 \
    examples/tiny_transformer.py --device cuda --ddp --steps 6 "$@" >"$out/$name.log" 2>&1
  echo "== $name ($*): exit $?"
  grep -E "flipped bit|replicas" "$out/$name.log" | head -4
  nanprov sql "$out/$name" "SELECT COUNT(*) AS rows, COUNT(DISTINCT step) AS steps FROM replica_digests WHERE parameter = ''"
}
ddp flip --flip-bit-step 4 --flip-bit-rank 1
ddp clean
BENCH_DDP=1 BENCH_CONFIGS="none nanprov nodigest" BENCH_MODELS=gpu-bound bash bench/gpu_overhead.sh \
  "${NANPROV_BENCH_ROUNDS:-2}" "${NANPROV_BENCH_STEPS:-60}" 2>&1 | tee "$out/digest-cost.txt"
