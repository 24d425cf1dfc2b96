#!/usr/bin/env bash
# Only the probes' entry points find the process's Probes: a file of probes/ that calls probes()
# or includes probes.h must be listed here. Everything else is handed what it uses by its owner
# (probes/libtorch/probes.h), so that no part reaches around it for a global.
#   tests/probes/entry_points_test.sh SOURCE_DIR
set -uo pipefail
cd "$1" || exit 1

# The entry points, each with what calls it.
allowed=(
  probes/libtorch/probes.h              # declares probes()
  probes/libtorch/probes.cpp            # defines it; the session's flush hook
  probes/libtorch/entry.cpp             # the C ABI the bootstrap calls (c_abi.h)
  probes/libtorch/attention_hook.cpp    # the dispatcher's kernels around the attention ops
  probes/libtorch/softmax_attention.cpp # the dispatcher's kernels around bmm, baddbmm and _softmax
  probes/libtorch/foreign_calls.cpp     # the nanprov ops the bootstrap's brackets call
  probes/libtorch/collective_checks.cpp # the dispatcher's kernels around c10d's ops; Work callbacks
  probes/libtorch/gradient_sentinel.cpp # the nanprov ops the bootstrap's optimizer hook calls
  probes/libtorch/module_trail.cpp      # the nanprov ops the bootstrap's module hooks call
)
# Each of these also holds a DeviceChecks::Measured trampoline (onMeasured), a plain function
# pointer that reaches its owner through probes(): gradient_sentinel, collective_checks, module_trail.

status=0
for f in "${allowed[@]}"; do
  if [ ! -f "$f" ]; then
    echo "listed as an entry point but absent (renamed? update this list): $f"
    status=1
  fi
done

# Calls of probes() and includes of probes.h, comment lines left out.
uses="$(grep -rnE --include='*.h' --include='*.cpp' --include='*.cu' \
          '(^|[^A-Za-z0-9_])probes\(\)|#include "probes/libtorch/probes\.h"' probes |
        grep -vE '^[^:]+:[0-9]+:[[:space:]]*//')"
# Not vacuous: the C ABI does call it.
if ! grep -q '^probes/libtorch/entry\.cpp:' <<<"$uses"; then
  echo "found no probes() in entry.cpp: this test's pattern no longer finds calls"
  status=1
fi

outside="$(while IFS= read -r line; do
  file="${line%%:*}"
  listed=0
  for f in "${allowed[@]}"; do [ "$file" = "$f" ] && listed=1; done
  [ "$listed" = 1 ] || echo "$line"
done <<<"$uses")"
if [ -n "$outside" ]; then
  echo "probes() or probes.h outside the entry points (hand the part what it uses from Probes instead):"
  echo "$outside"
  status=1
fi
exit "$status"
