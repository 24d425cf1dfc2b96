#!/usr/bin/env bash
# Runs on the GPU machine: what "kernels and speed" promises, measured there. Logs go to $OUT.
#   scripts/device-perf.sh replay    the reference's GPU test; a (2, 16, 4096, 128) bf16 causal
#                                    forward and backward captured from the benchmark model and
#                                    replayed through every backend and the reference, timed (CUDA,
#                                    and the backward on the CPU); the fused health check under ncu
#   scripts/device-perf.sh check-kernel  the health check's GPU tests, and the kernel under ncu
#   scripts/device-perf.sh overhead  the overhead benchmark (plain, nanprov, checks only) on both
#                                    models, side by side, and whether CUPTI was detached
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/device-build.sh" || exit 1

# The fused check: bytes, time and share of HBM bandwidth per launch, on the GPU-bound model.
checkKernelUnderNcu() {
  ncu --target-processes all --kernel-name regex:healthCheck --launch-skip 40 --launch-count 6 \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed \
    nanprov run --no-kernels --out "$out/ncu-run" -- python3 bench/gpu_model.py --steps 3 --warmup 1 >"$out/ncu.txt" 2>&1
  grep -E "healthCheck|gpu__time|dram__|sm__throughput" "$out/ncu.txt" | head -40
}

case "${1:-}" in
check-kernel)
  (cd build-device && ctest -j 8 -R "HealthCheck|ViewLayout" --output-on-failure 2>&1 | tail -3)
  checkKernelUnderNcu
  ;;
replay)
  (cd build-device && ctest -j 8 -R "ReferenceBlocks|HealthCheck|TensorMeasures|ViewLayout" --output-on-failure 2>&1 | tail -6)
  big=(bench/gpu_model.py --batch 2 --seq 4096 --layers 2 --steps 1 --warmup 0)
  nanprov run --out "$out/big" --capture 'layer=0,step=0' --capture-bytes 4G -- python3 "${big[@]}" 2>&1 | tail -2
  for capture in "$out"/big/captures/*.safetensors; do
    echo "== $(basename "$capture") on CUDA"
    /usr/bin/time -f "wall %e s, peak RSS %M KB" nanprov replay "$capture" --json >"$out/replay.json" 2>"$out/replay.err"
    cat "$out/replay.err"
    grep -c "cuBLAS" "$out/replay.err" | sed 's/^/cuBLAS warnings: /'
    python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print('root cause', r['root_cause']['class'], [(b['name'], {k: t['verdict'] for k, t in (b.get('tensors') or {}).items()}) for b in r['backends']])" "$out/replay.json"
  done
  bwd="$(ls "$out"/big/captures/*bwd*.safetensors | head -1)"
  echo "== $(basename "$bwd") on the CPU ($(nproc) cores)"
  /usr/bin/time -f "wall %e s" nanprov replay "$bwd" --device cpu 2>&1 | grep -E "nanprov replay|wall|root cause"
  checkKernelUnderNcu
  ;;
overhead)
  BENCH_CONFIGS="${BENCH_CONFIGS:-none nanprov checks naive}" bash bench/gpu_overhead.sh 2 15 2>&1 | tee "$out/overhead.txt"
  nanprov run --out "$out/detach" -- python3 bench/gpu_model.py --batch 1 --seq 256 --steps 6 --warmup 1 >/dev/null 2>&1
  nanprov sql "$out/detach" "SELECT key, value FROM meta WHERE key IN ('cupti_detached','kernels_attributed','kernel_tracer','host_syncs','probe_cost')"
  ;;
*)
  echo "usage: scripts/device-perf.sh replay|check-kernel|overhead" >&2; exit 2 ;;
esac
