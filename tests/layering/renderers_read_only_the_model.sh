#!/usr/bin/env bash
# The report's renderings read only its model (issue 51): neither a renderer nor any header it
# includes, however deep, includes a store/ header or a replay/ one (the known issues and the
# run's versions reach them typed, issue 65), and no renderer names RunData. What they show is
# worked out once, by the builder (report/build_report.h).
#   tests/layering/renderers_read_only_the_model.sh SOURCE_DIR
set -uo pipefail
root="$1"
renderers=(report/report_text report/report_json report/report_html report/perfetto_trace report/terminal_text
           report/trend_plots)
declare -A seen

# Every quoted include reached from $1 (a path under the root), once each.
reached() {
  local inc
  for inc in $(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$root/$1"); do
    [ -n "${seen[$inc]:-}" ] && continue
    seen[$inc]=1
    echo "$inc"
    [ -f "$root/$inc" ] && reached "$inc"
  done
}

status=0
for renderer in "${renderers[@]}"; do
  for file in "$renderer.h" "$renderer.cpp"; do
    seen=()
    if stores=$(reached "$file" | grep -E '^(store|replay)/'); then
      echo "$file reaches $(echo "$stores" | tr '\n' ' '): a renderer reads the model, not the store or replay" >&2
      status=1
    fi
    if grep -n 'RunData' "$root/$file" >&2; then
      echo "$file names RunData: a renderer reads the model (report/report.h), the builder reads the run" >&2
      status=1
    fi
  done
done
exit $status
