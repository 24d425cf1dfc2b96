#!/usr/bin/env bash
# bench/gpu_overhead.sh exits 0 once every model it was asked for printed its table (issue 66: with
# a configuration list without `deferred` it exited 1 after the first model's table, so a caller
# checking its status saw a failure and the later models never ran). No GPU here: `nanprov` and the
# model's python are stand-ins that print what the bench reads (a step line, a meta value).
#   tests/bench/gpu_overhead_exit_test.sh <source dir>
set -uo pipefail
src="$1"
stubs="$(mktemp -d)"
trap 'rm -rf "$stubs"' EXIT
cat >"$stubs/nanprov" <<'STUB'
#!/usr/bin/env bash
case "$1" in
  run) while [ "$1" != "--" ]; do shift; done; shift; exec "$@" ;;
  sql) echo value; echo '"value": "0"' ;;
  *) echo "stand-in" ;;
esac
STUB
cat >"$stubs/python" <<'STUB'
#!/usr/bin/env bash
echo "step_ms 10.0 mean_ms 11.0"
STUB
chmod +x "$stubs/nanprov" "$stubs/python"
failed=0
for models in "hf-llama" "gpu-bound launch-bound" "gpu-bound launch-bound hf-llama"; do
  for configs in "none nanprov checks" "none nanprov deferred"; do
    out="$(PATH="$stubs:$PATH" PYTHON="$stubs/python" BENCH_MODELS="$models" BENCH_CONFIGS="$configs" \
           bash "$src/bench/gpu_overhead.sh" 1 2 2>&1)"
    rc=$?
    tables=$(grep -c '^== ' <<<"$out")
    want=$(wc -w <<<"$models")
    if [ "$rc" != 0 ] || [ "$tables" != "$want" ]; then
      echo "FAIL: BENCH_MODELS='$models' BENCH_CONFIGS='$configs': exit $rc, $tables of $want tables"
      echo "$out" | tail -5
      failed=1
    fi
  done
done
[ "$failed" = 0 ] && echo "every model's table printed, exit 0"
exit "$failed"
