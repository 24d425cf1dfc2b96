#!/usr/bin/env bash
# The report's renderings of recorded runs, byte for byte: report, report --json, the page of
# report --html (RUN.expected.html), the trace (RUN.expected.trace.json), calls and kernels are functions of the store, so a change to how they are computed (the house, issue 25)
# must print what these recorded runs printed when they were recorded.
#   tests/golden/check.sh NANPROV            compare (a ctest)
#   tests/golden/check.sh NANPROV --update   rewrite the expected outputs (after a deliberate change)
set -uo pipefail
nanprov="$1"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# Copied: readers open the stores read-only, but the checkout stays untouched whatever they do;
# run by relative name so the outputs do not depend on where the checkout lives.
cp -r "$here/runs/." "$work/"
cd "$work"
status=0
for run in */; do
  run="${run%/}"
  {
    for cmd in "report $run" "report $run --json" "calls $run" "calls $run --nonfinite" "kernels $run" "trace $run --out $run.trace.json"; do
      echo "\$ nanprov $cmd"
      # shellcheck disable=SC2086
      "$nanprov" $cmd 2>&1
      echo "exit $?"
    done
  } >"$work/$run.out"
  # The page apart: what report --html prints is the text report, compared above. Written by
  # relative name too, so the page names the run as the text does.
  "$nanprov" report "$run" --html "$run.page.html" >/dev/null 2>&1
  if [ "${2:-}" = "--update" ]; then
    cp "$work/$run.out" "$here/$run.expected"
    cp "$work/$run.page.html" "$here/$run.expected.html"
    cp "$work/$run.trace.json" "$here/$run.expected.trace.json"
  else
    if ! diff -u "$here/$run.expected" "$work/$run.out"; then
      echo "golden: $run prints differently from when it was recorded (tests/golden/$run.expected)" >&2
      status=1
    fi
    if ! diff -u "$here/$run.expected.html" "$work/$run.page.html"; then
      echo "golden: $run's page differs from when it was recorded (tests/golden/$run.expected.html)" >&2
      status=1
    fi
    if ! diff -u "$here/$run.expected.trace.json" "$work/$run.trace.json"; then
      echo "golden: $run's trace differs from when it was recorded (tests/golden/$run.expected.trace.json)" >&2
      status=1
    fi
  fi
done
exit $status
