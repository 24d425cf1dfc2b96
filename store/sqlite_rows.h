// Private to store/: records to rows and back. A statement's parameters are bound from the fields
// named once, in INSERT order (bindRow), its result columns read into them in SELECT order
// (readRow), and every reader walks its rows through one loop (eachRow, or eachRowOf from the
// query's text), so a failed prepare or step is reported the same way everywhere.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "base/status.h"
#include "store/rank_store.h"
#include "store/sqlite_db.h"

namespace nanprov::store::sqlite {

inline void readColumn(sqlite3_stmt* s, int i, int64_t& v) { v = sqlite3_column_int64(s, i); }
inline void readColumn(sqlite3_stmt* s, int i, int& v) { v = sqlite3_column_int(s, i); }
inline void readColumn(sqlite3_stmt* s, int i, double& v) { v = sqlite3_column_double(s, i); }
inline void readColumn(sqlite3_stmt* s, int i, bool& v) { v = sqlite3_column_int(s, i) != 0; }
inline void readColumn(sqlite3_stmt* s, int i, std::string& v) { v = columnText(s, i); }
// NULL as nullopt (the twin of bindColumn's optional below).
inline void readColumn(sqlite3_stmt* s, int i, std::optional<double>& v) {
  if (sqlite3_column_type(s, i) == SQLITE_NULL) v.reset();
  else v = sqlite3_column_double(s, i);
}

// Reads columns first, first + 1, ... into `fields`, in order.
template <class... Fields>
void readRow(sqlite3_stmt* s, int first, Fields&... fields) {
  int i = first;
  (readColumn(s, i++, fields), ...);
}

inline void bindColumn(sqlite3_stmt* s, int i, int64_t v) { sqlite3_bind_int64(s, i, v); }
inline void bindColumn(sqlite3_stmt* s, int i, int v) { sqlite3_bind_int(s, i, v); }
inline void bindColumn(sqlite3_stmt* s, int i, double v) { sqlite3_bind_double(s, i, v); }  // NaN is stored as NULL
inline void bindColumn(sqlite3_stmt* s, int i, bool v) { sqlite3_bind_int(s, i, v ? 1 : 0); }
inline void bindColumn(sqlite3_stmt* s, int i, std::string_view v) {
  sqlite3_bind_text(s, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
}
inline void bindColumn(sqlite3_stmt* s, int i, const std::string& v) { bindColumn(s, i, std::string_view(v)); }
inline void bindColumn(sqlite3_stmt* s, int i, const char* v) { bindColumn(s, i, std::string_view(v)); }
template <class T>
void bindColumn(sqlite3_stmt* s, int i, const std::optional<T>& v) {
  if (v) bindColumn(s, i, *v);
  else sqlite3_bind_null(s, i);
}

// NULL for "" (a field that holds nothing), else the text.
inline std::optional<std::string_view> nullIfEmpty(const std::string& v) {
  return v.empty() ? std::nullopt : std::optional<std::string_view>(v);
}
// NULL for a negative count or seq (-1: none).
inline std::optional<int64_t> nullIfNegative(int64_t v) { return v < 0 ? std::nullopt : std::optional<int64_t>(v); }

// Binds parameters 1, 2, ... from `fields`, in order.
template <class... Fields>
void bindRow(sqlite3_stmt* s, const Fields&... fields) {
  int i = 1;
  (bindColumn(s, i++, fields), ...);
}

// Steps `s` to its end, calling row(s) for each row; stops at the first row that returns an
// error. A step that fails is `path`'s one-line "not a readable nanprov store".
template <class Row>
Status eachRow(sqlite3* db, sqlite3_stmt* s, const std::string& path, Row&& row) {
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    if (Status st = row(s); !st.ok()) return st;
  }
  return rc == SQLITE_DONE ? Status::Ok() : notAStore(path, errorOf(db));
}

// Prepares `sql` and steps it through eachRow: a statement that does not prepare (a table or
// column the file lacks) is `path`'s "not a readable nanprov store" too.
template <class Row>
Status eachRowOf(sqlite3* db, const std::string& path, const std::string& sql, Row&& row) {
  NANPROV_ASSIGN_OR_RETURN(Stmt st, orNotAStore(path, prepare(db, sql)));
  return eachRow(db, st.get(), path, std::forward<Row>(row));
}

}  // namespace nanprov::store::sqlite
