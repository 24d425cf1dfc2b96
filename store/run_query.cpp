// `nanprov sql`: one read-only SELECT over every rank store of a run.
#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include "base/text.h"
#include "store/rank_store.h"
#include "store/reader.h"
#include "store/schema.h"

namespace nanprov::store {
namespace {

const char* const kReadOnlyRefusal = "refused: nanprov sql is read-only; use one SELECT (or WITH ... SELECT)";

// What a user's query may do: read tables and views and call ordinary functions. Everything
// else (writes, ATTACH, DETACH, pragmas that set, functions that expose internals or files) is
// denied while the statement is prepared, so nothing runs; `denied` remembers why.
struct QueryGuard {
  bool denied = false;

  static int authorize(void* self, int action, const char* a, const char* b, const char*, const char*) {
    static const std::set<std::string> kInternalFunctions = {"fts3_tokenizer", "load_extension", "readfile",
                                                             "writefile",      "edit",           "sqlite_offset"};
    static const std::set<std::string> kReadPragmas = {"table_info", "table_xinfo",   "table_list",    "index_list",
                                                       "index_info", "function_list", "collation_list"};
    bool allowed = false;
    switch (action) {
      case SQLITE_SELECT:
      case SQLITE_READ:
      case SQLITE_RECURSIVE: allowed = true; break;
      case SQLITE_FUNCTION: allowed = b && !kInternalFunctions.count(b); break;
      case SQLITE_PRAGMA: allowed = a && kReadPragmas.count(a); break;
      default: break;
    }
    if (!allowed) static_cast<QueryGuard*>(self)->denied = true;
    return allowed ? SQLITE_OK : SQLITE_DENY;
  }
};

// Exactly one statement: the text after the first must be blank or comments.
StatusOr<sqlite::Stmt> prepareOneStatement(sqlite3* db, const std::string& sql, QueryGuard* guard) {
  sqlite3_stmt* raw = nullptr;
  const char* tail = nullptr;
  int rc = sqlite3_prepare_v2(db, sql.c_str(), static_cast<int>(sql.size()), &raw, &tail);
  sqlite::Stmt stmt(raw);
  // A write to one of the views fails before the authorizer is asked ("cannot modify calls
  // because it is a view"): the same refusal, worded the same.
  std::string error = rc == SQLITE_OK ? "" : sqlite::errorOf(db);
  if (guard->denied || error.rfind("cannot modify", 0) == 0) return Status::Error(kReadOnlyRefusal);
  if (rc != SQLITE_OK) return Status::Error("SQL error: " + error);
  if (!raw) return Status::Error("empty query: give one SELECT statement");
  // Anything after the first statement is refused, even what fails to prepare ("DELETE FROM
  // calls" fails on the view before the guard is asked): it would be dropped without a word.
  sqlite3_stmt* next = nullptr;
  int rest_rc = sqlite3_prepare_v2(db, tail, -1, &next, nullptr);
  sqlite::Stmt rest(next);
  if (next || rest_rc != SQLITE_OK || guard->denied) {
    return Status::Error("refused: one statement at a time; nanprov sql runs a single SELECT");
  }
  return stmt;
}

// The tables `nanprov sql` shows, each as the SELECT that gives one rank store's rows (`calls`
// has its own rank column; the others gain one).
const std::vector<std::pair<std::string, bool>> kQueryTables = {
    {"calls", false}, {"tensors", true},        {"kernels", true},        {"captures", true},
    {"steps", true},  {"meta", true},           {"sentinel", true},       {"step_summaries", true},
    {"trends", true}, {"trend_warnings", true}, {"replica_digests", true}};

// Tables later nanprov added, with their columns: a store written before one has no rows of it.
std::vector<const char*> laterTableColumns(const std::string& table) {
  if (table == "step_summaries") return {std::begin(kStepSummaryColumns), std::end(kStepSummaryColumns)};
  if (table == "trends") return kTrendColumns;
  if (table == "trend_warnings") return kTrendWarningColumns;
  if (table == "replica_digests") return kReplicaDigestColumns;
  return {};
}

std::string rowsOf(sqlite3* db, const std::string& table, bool add_rank, const std::string& alias, int rank) {
  // The store keeps a call's signature and note once; the table users query has them inline.
  if (table == "calls") {
    // Columns later nanprov added are NULL in older stores, so the ranks' rows still line up.
    auto later = [&](const char* column) {
      return std::string(sqlite::hasColumn(db, "calls", column, alias) ? "c." : "NULL AS ") + column;
    };
    return std::string(
               "SELECT c.seq, c.rank, c.step, c.layer, c.call, c.phase, c.fwd_seq, c.recompute, s.op, s.backend, "
               "s.module, c.start_ns, c.end_ns, c.injected, s.device, n.text AS unattributed, "
               "CASE c.health WHEN 0 THEN 'clean' WHEN 1 THEN 'source' ELSE 'propagated' END AS edge, ") +
           later("modified") + ", " + later("dropout_p") + " FROM " + alias + ".calls c JOIN " + alias +
           ".signatures s ON s.id = c.sig LEFT JOIN " + alias + ".notes n ON n.id = c.note";
  }
  // A store whose summaries predate their not_clean column summarised clean calls only.
  if (table == "step_summaries" && sqlite::hasColumn(db, table, "calls", alias) &&
      !sqlite::hasColumn(db, table, "not_clean", alias)) {
    return "SELECT " + std::to_string(rank) + " AS rank, *, 0 AS not_clean FROM " + alias + ".step_summaries";
  }
  // A store written before a later table has none of its rows: no rows, the same columns.
  if (std::vector<const char*> columns = laterTableColumns(table);
      !columns.empty() && !sqlite::hasColumn(db, table, columns.front(), alias)) {
    std::string nulls;
    for (const char* column : columns) nulls += std::string(", NULL AS ") + column;
    return "SELECT " + std::to_string(rank) + " AS rank" + nulls + " WHERE 0";
  }
  return std::string("SELECT ") + (add_rank ? std::to_string(rank) + " AS rank, " : "") + "* FROM " + alias + "." +
         table;
}

// Attaches one rank store read-only as `alias`; its rank in *rank.
Status attachStore(sqlite3* db, const std::string& path, const std::string& alias, int* rank) {
  RankInfo info;
  NANPROV_ASSIGN_OR_RETURN(auto check, openRankStore(path, &info));
  NANPROV_ASSIGN_OR_RETURN(auto attach, sqlite::prepare(db, "ATTACH DATABASE ? AS " + alias));
  std::string uri = "file:" + path + "?mode=ro";
  sqlite3_bind_text(attach.get(), 1, uri.c_str(), -1, SQLITE_TRANSIENT);
  if (sqlite3_step(attach.get()) != SQLITE_DONE) return notAStore(path, sqlite::errorOf(db));
  *rank = info.rank;
  return Status::Ok();
}

// Up to SQLite's attach limit, the tables are views over the attached stores: nothing is copied.
Status viewsOverStores(sqlite3* db, const std::vector<std::string>& paths) {
  std::map<std::string, std::string> unions;
  for (size_t i = 0; i < paths.size(); ++i) {
    std::string alias = "r" + std::to_string(i);
    int rank = 0;
    NANPROV_RETURN_IF_ERROR(attachStore(db, paths[i], alias, &rank));
    for (const auto& [table, add_rank] : kQueryTables) {
      unions[table] += (i ? " UNION ALL " : "") + rowsOf(db, table, add_rank, alias, rank);
    }
  }
  std::string views;
  for (const auto& [table, rows] : unions) views += "CREATE TEMP VIEW " + table + " AS " + rows + "; ";
  return sqlite::exec(db, views);
}

// Records the tables a statement reads while it is prepared, then asks the query guard.
struct TableReads {
  QueryGuard guard;
  std::set<std::string> tables;
  static int authorize(void* self, int action, const char* a, const char* b, const char* c, const char* d) {
    auto* reads = static_cast<TableReads*>(self);
    if (action == SQLITE_READ && a) reads->tables.insert(a);
    return QueryGuard::authorize(&reads->guard, action, a, b, c, d);
  }
};

// Beyond SQLite's attach limit (10 in most builds) the tables a query reads are copied into a
// private temporary database, attaching the stores a batch at a time. Only the tables the query
// reads are copied, so `SELECT COUNT(*) FROM calls` over 128 ranks copies calls alone.
Status tablesFromStores(sqlite3* db, const std::vector<std::string>& paths, const std::string& sql, int batch) {
  int rank = 0;
  NANPROV_RETURN_IF_ERROR(attachStore(db, paths[0], "r0", &rank));
  std::string shapes;
  for (const auto& [table, add_rank] : kQueryTables) {
    shapes += "CREATE TABLE " + table + " AS " + rowsOf(db, table, add_rank, "r0", rank) + " LIMIT 0; ";
  }
  NANPROV_RETURN_IF_ERROR(sqlite::exec(db, shapes + "DETACH DATABASE r0;"));
  TableReads reads;
  sqlite3_set_authorizer(db, &TableReads::authorize, &reads);
  auto probe = prepareOneStatement(db, sql, &reads.guard);
  sqlite3_set_authorizer(db, nullptr, nullptr);
  if (!probe.ok()) return probe.status();
  for (size_t first = 0; first < paths.size(); first += static_cast<size_t>(batch)) {
    size_t last = std::min(paths.size(), first + static_cast<size_t>(batch));
    std::string copy = "BEGIN; ", detach;
    for (size_t i = first; i < last; ++i) {
      std::string alias = "r" + std::to_string(i - first);
      NANPROV_RETURN_IF_ERROR(attachStore(db, paths[i], alias, &rank));
      for (const auto& [table, add_rank] : kQueryTables) {
        if (reads.tables.count(table))
          copy += "INSERT INTO main." + table + " " + rowsOf(db, table, add_rank, alias, rank) + "; ";
      }
      detach += "DETACH DATABASE " + alias + "; ";
    }
    NANPROV_RETURN_IF_ERROR(sqlite::exec(db, copy + "COMMIT; " + detach));
  }
  return Status::Ok();
}

// Interrupts the statement once its deadline has passed (checked every few thousand VM steps).
struct Deadline {
  std::chrono::steady_clock::time_point at;
  bool passed = false;
  static int check(void* self) {
    auto* d = static_cast<Deadline*>(self);
    d->passed = d->passed || std::chrono::steady_clock::now() > d->at;
    return d->passed ? 1 : 0;
  }
};

std::string bytesText(int64_t bytes) {
  return bytes >= (int64_t{1} << 30) ? std::to_string(bytes >> 30) + " GiB" : std::to_string(bytes >> 20) + " MiB";
}

}  // namespace

StatusOr<QueryResult> queryRun(const RunDirs& dirs, const std::string& sql, const QueryLimits& limits) {
  NANPROV_ASSIGN_OR_RETURN(auto paths, storesOf(dirs));
  // SQLite's own memory (sorts, group_concat, joins) is capped process-wide; the rows kept for
  // printing are counted against the same budget below.
  if (limits.max_memory_bytes > 0) sqlite3_hard_heap_limit64(limits.max_memory_bytes);
  const std::string over_memory = "refused: the query needs more than " + bytesText(limits.max_memory_bytes) +
                                  " of memory (nanprov sql --max-memory)";
  Deadline deadline{.at = std::chrono::steady_clock::now() +
                          std::chrono::milliseconds(static_cast<int64_t>(limits.timeout_seconds * 1000))};
  auto failed = [&](sqlite3* db, const std::string& context) {
    int code = sqlite3_errcode(db);
    if (deadline.passed || code == SQLITE_INTERRUPT) {
      return Status::Error("interrupted: the query ran longer than " + shortSeconds(limits.timeout_seconds) +
                           " (nanprov sql --timeout)");
    }
    if (code == SQLITE_NOMEM) return Status::Error(over_memory);
    return Status::Error(context + sqlite::errorOf(db));
  };
  // "": a private temporary database on disk, for the copies a run of many ranks needs.
  NANPROV_ASSIGN_OR_RETURN(auto db, sqlite::open("", sqlite::Mode::kReadWriteCreate));
  sqlite3* raw = db.get();
  if (limits.timeout_seconds > 0) sqlite3_progress_handler(raw, 10000, &Deadline::check, &deadline);
  int attachable = sqlite3_limit(raw, SQLITE_LIMIT_ATTACHED, -1);
  Status opened = static_cast<int>(paths.size()) <= attachable ? viewsOverStores(raw, paths)
                                                               : tablesFromStores(raw, paths, sql, attachable);
  if (!opened.ok()) return deadline.passed || sqlite3_errcode(raw) == SQLITE_NOMEM ? failed(raw, "") : opened;
  NANPROV_RETURN_IF_ERROR(sqlite::exec(raw, "PRAGMA query_only=ON;"));

  QueryGuard guard;
  sqlite3_set_authorizer(raw, &QueryGuard::authorize, &guard);
  NANPROV_ASSIGN_OR_RETURN(auto stmt, prepareOneStatement(raw, sql, &guard));
  sqlite3_stmt* s = stmt.get();
  if (!sqlite3_stmt_readonly(s)) return Status::Error(kReadOnlyRefusal);
  QueryResult result;
  int ncol = sqlite3_column_count(s);
  for (int c = 0; c < ncol; ++c) result.columns.push_back(sqlite3_column_name(s, c));
  result.numeric.assign(ncol, false);
  int rc;
  int64_t kept_bytes = 0;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    std::vector<std::optional<std::string>> row;
    for (int c = 0; c < ncol; ++c) {
      int type = sqlite3_column_type(s, c);
      if (result.rows.empty()) result.numeric[c] = type == SQLITE_INTEGER || type == SQLITE_FLOAT;
      if (type == SQLITE_NULL) row.emplace_back(std::nullopt);
      else row.emplace_back(columnText(s, c));
      kept_bytes += static_cast<int64_t>(sizeof(row.back()) + (row.back() ? row.back()->size() : 0));
    }
    result.rows.push_back(std::move(row));
    if (limits.max_memory_bytes > 0 && kept_bytes > limits.max_memory_bytes) return Status::Error(over_memory);
  }
  if (rc != SQLITE_DONE) return failed(raw, "SQL error: ");
  return result;
}

}  // namespace nanprov::store
