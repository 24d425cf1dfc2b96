#!/usr/bin/env bash
# The run's counters are typed (base/records/run_counters.h, issue 51): their meta keys are named by
# store/run_counters_meta.cpp alone, which writes them and reads them back. A key's literal anywhere
# else in nanprov's code (a probe writing it, a reader looking it up) fails here: fill or read the
# field instead. Tests may name keys (they check what `nanprov sql` shows).
#   tests/layering/counter_keys_named_once.sh SOURCE_DIR
set -uo pipefail
root="$1"
pair=store/run_counters_meta.cpp
dirs=(base store report cli probes tracer replay kernels bench)

# Keys nothing else in nanprov spells: a quoted literal anywhere is one.
keys=(calls_written dropped_rows store_budget calls_summarised not_clean_summarised summary_every steps_thinned host_syncs
      collectives_checked kernels_attributed cupti_records cupti_dropped_records cupti_detached deferred_checks
      measure_launches released_tensors capture_host_copies audit_rotation sentinel_nonfinite_grads
      sentinel_nonfinite_params probe_cost kernel_tracer)
# Keys that are a prefix, the rest being what was counted ("unprobed:" + what).
prefixes=(unprobed: unprobed_step: probe_ns: module_class:)
# Keys that are other things' names too (a JSON field, a run.json setting, a probe stage, an op):
# a literal on a line that speaks of the meta (meta, setMeta(, writeMeta(, metaText(, ...).
shared=(step_unit trail trail_compiled trail_compiled_backward mesh)

status=0
for k in "${keys[@]}" "${prefixes[@]}" "${shared[@]}"; do
  if ! grep -qE "[\"']$k[\"']" "$root/$pair"; then
    echo "$pair does not name \"$k\": the list here is out of date" >&2
    status=1
  fi
done

join() { local IFS='|'; echo "$*"; }
literal="[\"']($(join "${keys[@]}" "${prefixes[@]}" "${shared[@]}"))[\"']"
distinct="[\"']($(join "${keys[@]}" "${prefixes[@]}"))[\"']"
shared_literal="[\"']($(join "${shared[@]}"))[\"']"

# file:line:code with its // comment cut off (quoted text kept whole, so "a//b" stays).
code_of() { sed -E 's#^([^:]*:[0-9]+:)(([^/"]|"([^"\\]|\\.)*"|/[^/"])*)//.*$#\1\2#'; }

hits=$(cd "$root" && grep -rnE --include='*.h' --include='*.cpp' --include='*.cu' "$literal" "${dirs[@]}" |
       grep -v "^$pair:" | code_of |
       grep -E "^[^:]*:[0-9]+:.*$distinct|^[^:]*:[0-9]+:.*($shared_literal.*(meta|Meta\()|(meta|Meta\().*$shared_literal)")
if [ -n "$hits" ]; then
  echo "$hits" >&2
  echo "a run counter's meta key named outside $pair: set or read its RunCounters field" >&2
  status=1
fi
exit $status
