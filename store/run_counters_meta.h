// The run's counters (base/records/run_counters.h) in a store's meta table: the one place that
// names their keys and spells their values, both ways. The rows are what `nanprov sql` shows
// (`SELECT key, value FROM meta`), so they keep the keys and texts the probes always wrote.
#pragma once

#include <map>
#include <string>

#include "base/records/run_counters.h"
#include "base/status.h"
#include "store/meta_values.h"

struct sqlite3;

namespace nanprov::store {

// The meta rows of the fields `counters` says, key → value text; a field left empty has none.
std::map<std::string, std::string> metaRowsOf(const RunCounters& counters);

// Writes those rows into the store's meta (a key's later value replaces it), within the caller's
// transaction when it has one.
Status writeCounters(sqlite3* db, const RunCounters& counters);

// The counters a store's meta says, each value parsed strictly (base/numbers.h). A value that is
// not what its writer writes reads as unsaid, as the readers always took it (an unprobed count or
// step as 0, a half of the audit rotation as 0, a summary width as 1), except the budget's
// summaries, on whose counts a rank's totals rest: a damaged one leaves `summarised` empty and
// says why in *unreadable ("meta.calls_summarised is not a count"), for the reader to refuse the store.
RunCounters runCountersOf(const StoreMeta& meta, std::string* unreadable = nullptr);

}  // namespace nanprov::store
