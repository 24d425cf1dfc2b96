#!/usr/bin/env bash
# The store and the readers at the scale of real training (issue: 10M calls per rank in a second).
# Builds a run of CALLS calls in total over RANKS rank stores through the real writer
# (nanprov-store-bench: the StoreWriter that `nanprov run` uses), with a real non-finite edge at 95%
# of rank 0, then times the readers on it: report, report --json, calls --nonfinite, sql.
#   bench/store_scale.sh CALLS RANKS [BUDGET]   e.g. bench/store_scale.sh 10000000 1 64M
# BUDGET is each rank store's byte budget (nanprov run --store-budget; suffixes K M G), none by default.
# WRITTEN (default RANKS) ranks go through the writer; each other rank is a copy of the last written
# one with its own rank number (meta and calls; it has no kernels): ranks past the edge's are alike, and 1e9 calls take
# the writer hours. Its last line says how many were copies.
#   bench/store_scale.sh 1000000000 64 16M 2   the moonshot: 1e9 calls over 64 ranks
# Its last line reads: calls <N> ranks <R> bytes_per_call <B> bytes_per_rank <P> report_s <T> report_rss_mb <M>
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
usage="usage: bench/store_scale.sh CALLS RANKS [BUDGET [WRITTEN]]"
calls="${1:?$usage}" ranks="${2:?$usage}"
budget="$(numfmt --from=iec "${3:-0}")"
written="${4:-$ranks}"
# One written rank holds the edge: its copies would all carry it.
if [ "$written" -lt 2 ] && [ "$ranks" -gt 1 ]; then echo "bench/store_scale.sh: WRITTEN must be at least 2 (rank 0 holds the edge)" >&2; exit 2; fi
"$root/scripts/setup" nanprov nanprov-store-bench >/dev/null
bin="$root/build/bin"
dir="$(mktemp -d)/run"
trap 'rm -rf "$(dirname "$dir")"' EXIT
"$bin/nanprov-store-bench" "$dir" "$calls" "$ranks" 8 "$budget" "$written"
last="$dir/rank-$((written - 1)).sqlite"
for ((rank = written; rank < ranks; rank++)); do
  cp "$last" "$dir/rank-$rank.sqlite"
  python3 - "$dir/rank-$rank.sqlite" "$rank" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("UPDATE meta SET value = ? WHERE key = 'rank'", (sys.argv[2],))
db.execute("UPDATE calls SET rank = ?", (int(sys.argv[2]),))
db.commit()
PY
done
bytes="$(cat "$dir"/rank-*.sqlite | wc -c)"
largest="$(for f in "$dir"/rank-*.sqlite; do wc -c <"$f"; done | sort -n | tail -1)"
# Seconds and peak RSS (MB) of one reader command; its exit code 1 (an edge was found) is expected.
timed() {
  local out; out="$( { /usr/bin/time -f '%e %M' "$bin/nanprov" "$@" >/dev/null; } 2>&1 | tail -1)"
  echo "$out"
}
read -r report_s report_kb <<<"$(timed report "$dir")"
printf '  %-22s %6.2f s  %7.1f MB\n' "report" "$report_s" "$((report_kb / 1024))"
for reader in "report --json" "calls --nonfinite" "sql SELECT_COUNT"; do
  case "$reader" in
    "sql SELECT_COUNT") read -r s kb <<<"$(timed sql "$dir" "SELECT COUNT(*) FROM calls")" ;;
    *) read -r s kb <<<"$(timed ${reader%% *} "$dir" ${reader#* })" ;;
  esac
  printf '  %-22s %6.2f s  %7.1f MB\n' "$reader" "$s" "$((kb / 1024))"
done
"$bin/nanprov" report "$dir" | sed -n '1,2p;/after it/p' || true  # exit 1: the edge was found
echo "calls $calls ranks $ranks copied_ranks $((ranks - written)) bytes_per_call $((bytes / calls)) bytes_per_rank $largest report_s $report_s report_rss_mb $((report_kb / 1024))"
