// Private to store/: a rank store's trend rows and warnings (store/trend_keeper.h wrote them), read
// back bounded and checked: a store written before them has none, and a row that says nonsense
// (an unknown source or kind, a bucket that ends before it starts) is damage, one line.
#pragma once

#include <sqlite3.h>

#include <string>

#include "store/reader.h"

namespace nanprov::store {

Status loadTrends(sqlite3* db, const std::string& path, RankInfo* info);

}  // namespace nanprov::store
