#include "store/sqlite_db.h"

namespace nanprov::store::sqlite {

std::string errorOf(sqlite3* db) { return db ? sqlite3_errmsg(db) : "out of memory"; }

StatusOr<Db> open(const std::string& path, Mode mode) {
  int flags = mode == Mode::kReadOnly    ? SQLITE_OPEN_READONLY
              : mode == Mode::kReadWrite ? SQLITE_OPEN_READWRITE
                                         : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  // URIs on explicitly: `file:...?mode=ro` must not depend on how this SQLite was built.
  sqlite3* raw = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &raw, flags | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_URI, nullptr);
  Db db(raw);
  if (rc != SQLITE_OK) return Status::Error(path + ": " + errorOf(raw));
  sqlite3_busy_timeout(raw, 5000);
  // No value nanprov writes comes near this; a hostile store's expression that builds a huge
  // string or blob fails instead of taking the machine's memory.
  if (mode == Mode::kReadOnly) sqlite3_limit(raw, SQLITE_LIMIT_LENGTH, kMaxValueBytes);
  return db;
}

Status exec(sqlite3* db, const std::string& sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : errorOf(db);
    sqlite3_free(err);
    return Status::Error(msg);
  }
  return Status::Ok();
}

StatusOr<Stmt> prepare(sqlite3* db, const std::string& sql) {
  sqlite3_stmt* raw = nullptr;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &raw, nullptr) != SQLITE_OK) {
    return Status::Error(errorOf(db));
  }
  return Stmt(raw);
}

bool hasColumn(sqlite3* db, const std::string& table, const std::string& column, const std::string& schema) {
  auto probe = prepare(db, "SELECT 1 FROM pragma_table_info('" + table + "', '" + schema + "') WHERE name = ?");
  if (!probe.ok()) return false;
  sqlite3_bind_text(probe->get(), 1, column.c_str(), static_cast<int>(column.size()), SQLITE_TRANSIENT);
  return sqlite3_step(probe->get()) == SQLITE_ROW;
}

bool hasTable(sqlite3* db, const std::string& table) {
  auto probe = prepare(db, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?");
  if (!probe.ok()) return false;
  sqlite3_bind_text(probe->get(), 1, table.c_str(), static_cast<int>(table.size()), SQLITE_TRANSIENT);
  return sqlite3_step(probe->get()) == SQLITE_ROW;
}

Transaction::Transaction(sqlite3* db) : db_(db) {}

Transaction::~Transaction() {
  // A rollback that fails leaves nothing of the transaction's: SQLite rolls it back at close.
  if (open_) exec(db_, "ROLLBACK").ignore();
}

Status Transaction::begin() {
  NANPROV_RETURN_IF_ERROR(exec(db_, "BEGIN IMMEDIATE"));
  open_ = true;
  return Status::Ok();
}

Status Transaction::commit() {
  open_ = false;
  Status st = exec(db_, "COMMIT");
  // A COMMIT that failed (a full disk) may leave the transaction open: rolled back here, or every
  // later BEGIN would fail and the writer would never write again.
  if (!st.ok() && !sqlite3_get_autocommit(db_))
    exec(db_, "ROLLBACK").ignore();  // the COMMIT's failure is the one returned
  return st;
}

}  // namespace nanprov::store::sqlite
