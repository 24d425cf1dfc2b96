#!/usr/bin/env bash
# Only the probes' entry points find the process's Probes: a file of probes/ that calls processProbes()
# or includes probes.h must be listed here. Everything else is handed what it uses by its owner
# (probes/libtorch/probes.h), so that no part reaches around it for a global.
#   tests/probes/entry_points_test.sh SOURCE_DIR
set -uo pipefail
cd "$1" || exit 1

# The entry points, each with what calls it. A part Probes owns (a header probes.h includes) is
# never one: its entry points live in a file of their own (collective_probe, *_ops), or the part
# and its owner would include each other.
allowed=(
  probes/libtorch/probes.h                  # declares processProbes()
  probes/libtorch/probes.cpp                # defines it; the session's flush hook
  probes/libtorch/entry.cpp                 # the C ABI the bootstrap calls (c_abi.h)
  probes/libtorch/attention_hook.cpp        # the dispatcher's kernels around the attention ops
  probes/libtorch/softmax_attention.cpp     # the dispatcher's kernels around bmm, baddbmm and _softmax
  probes/libtorch/foreign_calls.cpp         # the nanprov ops the bootstrap's brackets call
  probes/libtorch/collective_probe.cpp      # the dispatcher's kernels around c10d's ops; Work callbacks
  probes/libtorch/gradient_sentinel_ops.cpp # the nanprov ops the bootstrap's optimizer hook calls
  probes/libtorch/module_trail_ops.cpp      # the nanprov ops the bootstrap's module hooks call
)

status=0
for f in "${allowed[@]}"; do
  if [ ! -f "$f" ]; then
    echo "listed as an entry point but absent (renamed? update this list): $f"
    status=1
  fi
done

# Calls of processProbes() and includes of probes.h, comment lines left out.
uses="$(grep -rnE --include='*.h' --include='*.cpp' --include='*.cu' \
          '(^|[^A-Za-z0-9_])processProbes\(\)|#include "probes/libtorch/probes\.h"' probes |
        grep -vE '^[^:]+:[0-9]+:[[:space:]]*//')"
# Not vacuous: the C ABI does call it.
if ! grep -q '^probes/libtorch/entry\.cpp:' <<<"$uses"; then
  echo "found no processProbes() in entry.cpp: this test's pattern no longer finds calls"
  status=1
fi

# What probes.h includes, directly or through another header of probes/: the parts Probes owns.
owned=" "
todo=(probes/libtorch/probes.h)
while [ ${#todo[@]} -gt 0 ]; do
  header="${todo[0]}"
  todo=("${todo[@]:1}")
  [ -f "$header" ] || continue
  for inc in $(sed -nE 's|^#include "(probes/[^"]+\.h)".*|\1|p' "$header"); do
    case "$owned" in
      *" $inc "*) ;;
      *) owned="$owned$inc "; todo+=("$inc") ;;
    esac
  done
done
# Not vacuous: the owner does include the checks.
case "$owned" in *" probes/libtorch/device_checks.h "*) ;; *)
  echo "probes.h includes no device_checks.h: this test no longer finds what Probes owns"
  status=1 ;;
esac
for f in "${allowed[@]}"; do
  case "$f" in probes/libtorch/probes.*) continue ;; esac
  case "$owned" in *" ${f%.cpp}.h "*)
    echo "listed as an entry point but a part Probes owns (probes.h includes ${f%.cpp}.h): move its entry points to a file of their own"
    status=1 ;;
  esac
done

outside="$(while IFS= read -r line; do
  file="${line%%:*}"
  listed=0
  for f in "${allowed[@]}"; do [ "$file" = "$f" ] && listed=1; done
  [ "$listed" = 1 ] || echo "$line"
done <<<"$uses")"
if [ -n "$outside" ]; then
  echo "processProbes() or probes.h outside the entry points (hand the part what it uses from Probes instead):"
  echo "$outside"
  status=1
fi
exit "$status"
