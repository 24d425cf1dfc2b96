// Private to store/: a thin, status-returning face over sqlite3 so the rest of nanprov never
// includes sqlite3.h.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <string>
#include <vector>

#include "base/scoped_resource.h"
#include "base/status.h"

namespace nanprov::store::sqlite {

using Db = ScopedResource<sqlite3*, &sqlite3_close_v2>;
using Stmt = ScopedResource<sqlite3_stmt*, &sqlite3_finalize>;

enum class Mode { kReadOnly, kReadWrite, kReadWriteCreate };

// The largest string or blob a read-only connection builds.
inline constexpr int kMaxValueBytes = 64 << 20;

// Opens `path`. Read-only opens fail when the file does not exist.
StatusOr<Db> open(const std::string& path, Mode mode);
Status exec(sqlite3* db, const std::string& sql);
StatusOr<Stmt> prepare(sqlite3* db, const std::string& sql);
std::string errorOf(sqlite3* db);
// Whether `schema`.`table` has `column`: stores written by older nanprov lack later columns.
// `schema` and `table` are nanprov's own names (an ATTACH alias), never a user's text.
bool hasColumn(sqlite3* db, const std::string& table, const std::string& column, const std::string& schema = "main");
// Whether the store has the table `table` (stores written before it was added have none).
bool hasTable(sqlite3* db, const std::string& table);

// Commits on commit(), rolls back when dropped without it.
class Transaction {
 public:
  explicit Transaction(sqlite3* db);
  ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  Status begin();
  Status commit();

 private:
  sqlite3* db_;
  bool open_ = false;
};

}  // namespace nanprov::store::sqlite
