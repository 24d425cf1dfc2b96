// Private to store/: opening one rank store for reading, and the one-line error every reader
// gives when a store is not what nanprov wrote.
#pragma once

#include <string>
#include <vector>

#include "store/reader.h"
#include "store/run_dir.h"
#include "store/sqlite_db.h"

namespace nanprov::store {

// "<path>: not a readable nanprov store (<why>); the file is damaged or was not written by nanprov".
Status notAStore(const std::string& path, const std::string& why);

// `result` as it is, or where it failed, `path`'s notAStore with its message: a query a store
// cannot answer (a table or column it lacks, a damaged page) says so in the one way.
//   NANPROV_ASSIGN_OR_RETURN(sqlite::Stmt st, orNotAStore(path, sqlite::prepare(db, sql)));
template <class T>
StatusOr<T> orNotAStore(const std::string& path, StatusOr<T> result) {
  if (!result.ok()) return notAStore(path, result.status().message());
  return result;
}

// A text column, "" for NULL.
std::string columnText(sqlite3_stmt* s, int i);

// Opens one rank store read-only, checks that it is a nanprov store of the schema this build
// reads, and fills *info with its path, rank and meta.
StatusOr<sqlite::Db> openRankStore(const std::string& path, RankInfo* info);

// Whether `dir` is a run directory (it has run.json), with or without rank stores.
bool isRunDir(const std::string& dir);

// The rank stores of a run, or an error that says the directories hold none.
StatusOr<std::vector<std::string>> storesOf(const RunDirs& dirs);

// Whether every one of `dirs` is a run directory.
bool areRunDirs(const RunDirs& dirs);

}  // namespace nanprov::store
