#!/usr/bin/env bash
# Runs on the GPU machine: issue 66's cost floor. The overhead bench (none, nanprov, checks only)
# side by side on BENCH_MODELS (default: the GPU-bound and launch-bound models), with each model's
# probe_cost (COST_BENCH=0 skips it); then where the GPU time goes under ncu (nsys is not usable
# there): every kernel's duration over a short GPU-bound run, the checks' kernels against the rest
# (bench/ncu_share.py), and each check's bytes read from DRAM, L2 hits and share of HBM bandwidth.
# Logs go to $OUT. NANPROV_DEVICE_TARGETS="nanprov nanprov_probes" builds only what it runs.
#   scripts/device-cost.sh [rounds] [steps]
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/device-build.sh" || exit 1
cat "$out/gpu.txt"
runs="$(mktemp -d)"  # run stores: not brought back
if [ "${COST_BENCH:-1}" = 1 ]; then
  BENCH_CONFIGS="${BENCH_CONFIGS:-none nanprov checks}" BENCH_MODELS="${BENCH_MODELS:-gpu-bound launch-bound}" \
    bash bench/gpu_overhead.sh "${1:-2}" "${2:-15}" 2>&1 | tee "$out/overhead.txt"
  echo "bench exit ${PIPESTATUS[0]}"
fi
# The GPU-bound model with fewer layers: its checks' share of the step is the same, and ncu
# serialises every kernel. --no-kernels: ncu and nanprov's CUPTI tracer do not share CUPTI.
layers="${COST_NCU_LAYERS:-4}"
model=(bench/gpu_model.py --layers "$layers" --steps 2 --warmup 1)
ncu --target-processes all --metrics gpu__time_duration.sum --csv --page raw --log-file "$out/ncu-all.csv" \
  nanprov run --no-kernels --out "$runs/ncu-all" -- python3 "${model[@]}" >/dev/null 2>&1
echo "== every kernel's GPU time, GPU-bound model (${model[*]}), checks only"
python3 bench/ncu_share.py "$out/ncu-all.csv"
# One step's checks: a forward and a backward per layer, then the gradient sentinel's dense check.
ncu --target-processes all --kernel-name regex:"healthCheck|denseCheck" --launch-count $((2 * layers + 1)) \
  --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sector_hit_rate.pct,launch__grid_size \
  nanprov run --no-kernels --out "$runs/ncu-checks" -- python3 "${model[@]}" >"$out/ncu-checks.txt" 2>&1
echo "== the checks' kernels of one step"
grep -E "CheckKernel|gpu__time|dram__|lts__|launch__grid" "$out/ncu-checks.txt" | sed 's/  */ /g'
