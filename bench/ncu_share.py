"""Where a run's GPU time goes, from Nsight Compute's raw CSV (--csv --page raw, gpu__time_duration.sum):
the health checks' kernels (nanprov's fused and dense checks) against every other kernel, with
their counts, totals and mean durations. The checks' share of the GPU time is what they cost a
GPU-bound step when nothing overlaps them (issue 66).
    python3 bench/ncu_share.py ncu.csv"""
import csv
import sys
from collections import defaultdict


def kind(name):
    if "healthCheckKernel" in name:
        return "fused check"
    if "denseCheckKernel" in name:
        return "dense check"
    return "training"


def main(path):
    with open(path, newline="") as f:
        lines = [line for line in f if line.startswith('"')]
    rows = list(csv.DictReader(lines))
    total = defaultdict(float)
    count = defaultdict(int)
    for row in rows:
        try:
            ns = float(row["gpu__time_duration.sum"].replace(",", ""))
        except (KeyError, ValueError):
            continue  # the units row
        k = kind(row.get("Kernel Name", ""))
        total[k] += ns
        count[k] += 1
    train = total["training"] or 1.0
    for k in ("training", "fused check", "dense check"):
        mean = total[k] / count[k] / 1e3 if count[k] else 0.0
        print(f"{k:12s} {count[k]:6d} kernels {total[k] / 1e6:10.3f} ms  mean {mean:8.1f} us  "
              f"{100 * total[k] / train:6.2f}% of training kernels' time")


if __name__ == "__main__":
    main(sys.argv[1])
