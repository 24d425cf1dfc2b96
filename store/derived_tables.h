// Private to store/: the tables a rank store derives from others, checked against them before
// anything is read from them as truth. The budget's summaries against its meta counts, each
// summary row against what a summary can be, the steps table against the calls and the thinned
// count, the trends against the calls written and the summaries' maxima. Aggregates the store
// answers from its small tables and one index lookup, never a scan of its calls, in one snapshot
// (a live run's writer commits between statements otherwise).
#pragma once

#include <sqlite3.h>

#include <string>
#include <vector>

#include "store/reader.h"

namespace nanprov::store {

// What in `info`'s store disagrees with what it derives from, one line each ("rank 0's
// step_summaries count 4096 calls, but its meta says 4000 were summarised"); empty when all agree.
std::vector<std::string> derivedTableDisagreements(sqlite3* db, const RankInfo& info);

}  // namespace nanprov::store
