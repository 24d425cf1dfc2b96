#include "store/reader.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <tuple>

#include "base/numbers.h"
#include "store/run_dir.h"
#include "store/schema.h"
#include "store/sqlite_db.h"

namespace nanprov {
namespace {

std::string columnText(sqlite3_stmt* s, int i) {
  const unsigned char* t = sqlite3_column_text(s, i);
  return t ? reinterpret_cast<const char*>(t) : "";
}

Status notAStore(const std::string& path, const std::string& why) {
  return Status::Error(path + ": not a readable nanprov store (" + why +
                       "); the file is damaged or was not written by nanprov");
}

// Opens one rank store read-only and checks that it is a nanprov store of a schema we read.
StatusOr<sqlite::Db> openRankStore(const std::string& path, RankInfo* info) {
  std::error_code ec;
  if (std::filesystem::file_size(path, ec) == 0 && !ec) return notAStore(path, "empty file");
  auto db = sqlite::open(path, sqlite::Mode::kReadOnly);
  if (!db.ok()) return notAStore(path, db.status().message());
  auto meta = sqlite::prepare(db->get(), "SELECT key, value FROM meta");
  if (!meta.ok()) return notAStore(path, meta.status().message());
  int rc;
  while ((rc = sqlite3_step(meta->get())) == SQLITE_ROW) {
    info->meta[columnText(meta->get(), 0)] = columnText(meta->get(), 1);
  }
  if (rc != SQLITE_DONE) return notAStore(path, sqlite::errorOf(db->get()));
  auto version = info->meta.find("schema_version");
  if (version == info->meta.end()) return notAStore(path, "no schema_version");
  if (version->second != std::to_string(kSchemaVersion)) {
    return Status::Error(path + ": store schema version " + version->second + ", this nanprov reads " +
                         std::to_string(kSchemaVersion) + "; use the nanprov that wrote the run");
  }
  info->path = path;
  info->rank = 0;
  if (auto it = info->meta.find("rank"); it != info->meta.end()) {
    auto rank = parseInteger(it->second, 0, kMaxRank);
    if (!rank) return notAStore(path, "meta.rank is not a rank number");
    info->rank = static_cast<int>(*rank);
  }
  return db;
}

Status loadCalls(sqlite3* db, const std::string& path, std::vector<CallRecord>* out) {
  auto calls = sqlite::prepare(db,
      "SELECT seq,rank,step,layer,call,phase,IFNULL(fwd_seq,-1),op,backend,IFNULL(module,''),"
      "start_ns,end_ns,IFNULL(injected,''),device,IFNULL(unattributed,''),recompute FROM calls ORDER BY seq");
  if (!calls.ok()) return notAStore(path, calls.status().message());
  auto tensors = sqlite::prepare(db,
      "SELECT seq,role,dtype,shape,numel,nan,posinf,neginf,max_abs,all_zero,IFNULL(masked_rows,-1) "
      "FROM tensors ORDER BY seq, rowid");  // rowid keeps the probes' role order
  if (!tensors.ok()) return notAStore(path, tensors.status().message());

  size_t first = out->size();
  sqlite3_stmt* s = calls->get();
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    CallRecord c;
    c.seq = sqlite3_column_int64(s, 0);
    c.rank = sqlite3_column_int(s, 1);
    c.step = sqlite3_column_int64(s, 2);
    c.layer = sqlite3_column_int64(s, 3);
    c.call = sqlite3_column_int64(s, 4);
    parsePhase(columnText(s, 5), &c.phase);
    c.fwd_seq = sqlite3_column_int64(s, 6);
    c.op = columnText(s, 7);
    c.backend = columnText(s, 8);
    c.module = columnText(s, 9);
    c.start_ns = sqlite3_column_int64(s, 10);
    c.end_ns = sqlite3_column_int64(s, 11);
    c.injected = columnText(s, 12);
    c.device = columnText(s, 13);
    c.unattributed = columnText(s, 14);
    c.recompute = sqlite3_column_int(s, 15) != 0;
    out->push_back(std::move(c));
  }
  if (rc != SQLITE_DONE) return notAStore(path, sqlite::errorOf(db));

  // Both queries are ordered by seq: merge-join tensors onto their calls.
  size_t i = first;
  s = tensors->get();
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    int64_t seq = sqlite3_column_int64(s, 0);
    while (i < out->size() && (*out)[i].seq < seq) ++i;
    if (i == out->size() || (*out)[i].seq != seq) continue;  // orphan row from a torn batch
    TensorHealth t;
    t.role = columnText(s, 1);
    t.dtype = columnText(s, 2);
    t.shape = columnText(s, 3);
    t.numel = sqlite3_column_int64(s, 4);
    t.nan = sqlite3_column_int64(s, 5);
    t.posinf = sqlite3_column_int64(s, 6);
    t.neginf = sqlite3_column_int64(s, 7);
    t.max_abs = sqlite3_column_double(s, 8);
    t.all_zero = sqlite3_column_int(s, 9) != 0;
    t.masked_rows = sqlite3_column_int64(s, 10);
    (*out)[i].tensors.push_back(std::move(t));
  }
  if (rc != SQLITE_DONE) return notAStore(path, sqlite::errorOf(db));
  return Status::Ok();
}

Status loadKernels(sqlite3* db, const std::string& path, int rank, std::vector<KernelRecord>* out) {
  auto kernels = sqlite::prepare(db,
      "SELECT seq,correlation_id,name,grid_x,grid_y,grid_z,block_x,block_y,block_z,start_ns,end_ns,"
      "device,stream FROM kernels ORDER BY seq, start_ns, rowid");
  if (!kernels.ok()) return notAStore(path, kernels.status().message());
  sqlite3_stmt* s = kernels->get();
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    KernelRecord k;
    k.rank = rank;
    k.seq = sqlite3_column_int64(s, 0);
    k.correlation_id = sqlite3_column_int64(s, 1);
    k.name = columnText(s, 2);
    for (int d = 0; d < 3; ++d) {
      k.grid[d] = sqlite3_column_int(s, 3 + d);
      k.block[d] = sqlite3_column_int(s, 6 + d);
    }
    k.start_ns = sqlite3_column_int64(s, 9);
    k.end_ns = sqlite3_column_int64(s, 10);
    k.device = sqlite3_column_int(s, 11);
    k.stream = sqlite3_column_int64(s, 12);
    out->push_back(std::move(k));
  }
  return rc == SQLITE_DONE ? Status::Ok() : notAStore(path, sqlite::errorOf(db));
}

Status loadCaptures(sqlite3* db, const std::string& path, int rank, std::vector<CaptureRecord>* out) {
  auto captures = sqlite::prepare(db, "SELECT seq,trigger,path,bytes,skipped FROM captures ORDER BY rowid");
  if (!captures.ok()) return notAStore(path, captures.status().message());
  sqlite3_stmt* s = captures->get();
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    CaptureRecord c;
    c.rank = rank;
    c.seq = sqlite3_column_int64(s, 0);
    c.trigger = columnText(s, 1);
    c.path = columnText(s, 2);
    c.bytes = sqlite3_column_int64(s, 3);
    c.skipped = columnText(s, 4);
    out->push_back(std::move(c));
  }
  return rc == SQLITE_DONE ? Status::Ok() : notAStore(path, sqlite::errorOf(db));
}

Status loadSentinel(sqlite3* db, const std::string& path, int rank, std::vector<SentinelRecord>* out) {
  auto rows = sqlite::prepare(db, "SELECT step,tensor,parameter,IFNULL(norm,'nan') FROM sentinel ORDER BY rowid");
  if (!rows.ok()) return notAStore(path, rows.status().message());
  sqlite3_stmt* s = rows->get();
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    SentinelRecord f;
    f.rank = rank;
    f.step = sqlite3_column_int64(s, 0);
    f.tensor = columnText(s, 1);
    f.parameter = columnText(s, 2);
    f.norm = sqlite3_column_type(s, 3) == SQLITE_TEXT ? std::nan("") : sqlite3_column_double(s, 3);
    out->push_back(std::move(f));
  }
  return rc == SQLITE_DONE ? Status::Ok() : notAStore(path, sqlite::errorOf(db));
}

int64_t countSteps(sqlite3* db) {
  auto st = sqlite::prepare(db, "SELECT COUNT(*) FROM steps");
  if (!st.ok() || sqlite3_step(st->get()) != SQLITE_ROW) return 0;
  return sqlite3_column_int64(st->get(), 0);
}

bool isRunDir(const std::string& dir) {
  std::error_code ec;
  return std::filesystem::is_regular_file(std::filesystem::path(dir) / "run.json", ec);
}

StatusOr<std::vector<std::string>> storesOf(const std::string& dir) {
  std::vector<std::string> paths = rankStorePaths(dir);
  if (paths.empty()) {
    return Status::Error(dir + " holds no rank store (rank-<r>.sqlite): the run recorded no attention "
                         "call, or it is not a nanprov run directory");
  }
  return paths;
}

}  // namespace

const CaptureRecord* RunData::captureOf(int rank, int64_t seq) const {
  const CaptureRecord* found = nullptr;
  for (const CaptureRecord& c : captures) {
    if (c.rank == rank && c.seq == seq && (!found || (found->path.empty() && !c.path.empty()))) found = &c;
  }
  return found;
}

std::vector<const KernelRecord*> RunData::kernelsOf(int rank, int64_t seq) const {
  auto key = [](const KernelRecord& k) { return std::make_pair(k.rank, k.seq); };
  auto lo = std::lower_bound(kernels.begin(), kernels.end(), std::make_pair(rank, seq),
                             [&](const KernelRecord& k, const std::pair<int, int64_t>& v) { return key(k) < v; });
  std::vector<const KernelRecord*> out;
  for (auto it = lo; it != kernels.end() && key(*it) == std::make_pair(rank, seq); ++it) out.push_back(&*it);
  return out;
}

std::map<std::string, int64_t> RunData::unprobed() const {
  std::map<std::string, int64_t> out;
  for (const RankInfo& r : ranks) {
    for (auto it = r.meta.lower_bound("unprobed:"); it != r.meta.end() && it->first.rfind("unprobed:", 0) == 0; ++it) {
      out[it->first.substr(9)] += std::strtoll(it->second.c_str(), nullptr, 10);
    }
  }
  return out;
}

std::string RunData::stepUnit() const {
  for (const RankInfo& r : ranks) {
    auto it = r.meta.find("step_unit");
    if (it != r.meta.end() && it->second == "forward_pass") return it->second;
  }
  return "optimizer_step";
}

StatusOr<RunData> loadRun(const std::string& dir) {
  RunData run;
  run.dir = dir;
  std::vector<std::string> paths = rankStorePaths(dir);
  if (paths.empty() && isRunDir(dir)) return run;
  if (paths.empty()) return storesOf(dir).status();
  for (const std::string& path : paths) {
    RankInfo info;
    auto db = openRankStore(path, &info);
    if (!db.ok()) return db.status();
    NANPROV_RETURN_IF_ERROR(loadCalls(db->get(), path, &run.calls));
    NANPROV_RETURN_IF_ERROR(loadKernels(db->get(), path, info.rank, &run.kernels));
    NANPROV_RETURN_IF_ERROR(loadCaptures(db->get(), path, info.rank, &run.captures));
    NANPROV_RETURN_IF_ERROR(loadSentinel(db->get(), path, info.rank, &run.sentinel));
    info.steps = countSteps(db->get());
    run.ranks.push_back(std::move(info));
  }
  std::stable_sort(run.calls.begin(), run.calls.end(), [](const CallRecord& a, const CallRecord& b) {
    return std::tie(a.step, a.start_ns, a.rank, a.seq) < std::tie(b.step, b.start_ns, b.rank, b.seq);
  });
  std::stable_sort(run.kernels.begin(), run.kernels.end(), [](const KernelRecord& a, const KernelRecord& b) {
    return std::tie(a.rank, a.seq) < std::tie(b.rank, b.seq);
  });
  return run;
}

namespace {

const char* const kReadOnlyRefusal = "refused: nanprov sql is read-only; use one SELECT (or WITH ... SELECT)";

// What a user's query may do: read tables and views and call ordinary functions. Everything
// else (writes, ATTACH, DETACH, pragmas that set, functions that expose internals or files) is
// denied while the statement is prepared, so nothing runs; `denied` remembers why.
struct QueryGuard {
  bool denied = false;

  static int authorize(void* self, int action, const char* a, const char* b, const char*, const char*) {
    static const std::set<std::string> kInternalFunctions = {
        "fts3_tokenizer", "load_extension", "readfile", "writefile", "edit", "sqlite_offset"};
    static const std::set<std::string> kReadPragmas = {"table_info", "table_xinfo", "table_list", "index_list",
                                                       "index_info", "function_list", "collation_list"};
    bool allowed = false;
    switch (action) {
      case SQLITE_SELECT:
      case SQLITE_READ:
      case SQLITE_RECURSIVE:
        allowed = true;
        break;
      case SQLITE_FUNCTION:
        allowed = b && !kInternalFunctions.count(b);
        break;
      case SQLITE_PRAGMA:
        allowed = a && kReadPragmas.count(a);
        break;
      default:
        break;
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
  sqlite3_stmt* next = nullptr;
  sqlite3_prepare_v2(db, tail, -1, &next, nullptr);
  sqlite::Stmt rest(next);
  if (next || guard->denied) {
    return Status::Error("refused: one statement at a time; nanprov sql runs a single SELECT");
  }
  return stmt;
}

}  // namespace

StatusOr<QueryResult> queryRun(const std::string& dir, const std::string& sql) {
  auto paths = storesOf(dir);
  if (!paths.ok()) return paths.status();
  auto db = sqlite::open(":memory:", sqlite::Mode::kReadWriteCreate);
  if (!db.ok()) return db.status();
  sqlite3* raw = db->get();
  if (static_cast<int>(paths->size()) > sqlite3_limit(raw, SQLITE_LIMIT_ATTACHED, -1)) {
    return Status::Error("this run has " + std::to_string(paths->size()) + " rank stores, and this SQLite attaches at most " +
                         std::to_string(sqlite3_limit(raw, SQLITE_LIMIT_ATTACHED, -1)) +
                         " at once; nanprov report, calls and kernels read them all");
  }

  std::string calls, tensors, kernels, captures, steps, meta, sentinel;
  for (size_t i = 0; i < paths->size(); ++i) {
    RankInfo info;
    auto check = openRankStore((*paths)[i], &info);
    if (!check.ok()) return check.status();
    std::string alias = "r" + std::to_string(i);
    auto attach = sqlite::prepare(raw, "ATTACH DATABASE ? AS " + alias);
    if (!attach.ok()) return attach.status();
    std::string uri = "file:" + (*paths)[i] + "?mode=ro";
    sqlite3_bind_text(attach->get(), 1, uri.c_str(), -1, SQLITE_TRANSIENT);
    if (sqlite3_step(attach->get()) != SQLITE_DONE) return notAStore((*paths)[i], sqlite::errorOf(raw));
    std::string rank = std::to_string(info.rank);
    std::string sep = i ? " UNION ALL " : "";
    calls += sep + "SELECT * FROM " + alias + ".calls";
    tensors += sep + "SELECT " + rank + " AS rank, * FROM " + alias + ".tensors";
    kernels += sep + "SELECT " + rank + " AS rank, * FROM " + alias + ".kernels";
    captures += sep + "SELECT " + rank + " AS rank, * FROM " + alias + ".captures";
    steps += sep + "SELECT " + rank + " AS rank, * FROM " + alias + ".steps";
    sentinel += sep + "SELECT " + rank + " AS rank, * FROM " + alias + ".sentinel";
    meta += sep + "SELECT " + rank + " AS rank, * FROM " + alias + ".meta";
  }
  NANPROV_RETURN_IF_ERROR(sqlite::exec(raw,
      "CREATE TEMP VIEW calls AS " + calls + "; CREATE TEMP VIEW tensors AS " + tensors +
      "; CREATE TEMP VIEW kernels AS " + kernels + "; CREATE TEMP VIEW captures AS " + captures +
      "; CREATE TEMP VIEW steps AS " + steps + "; CREATE TEMP VIEW meta AS " + meta +
      "; CREATE TEMP VIEW sentinel AS " + sentinel +
      "; PRAGMA query_only=ON;"));

  QueryGuard guard;
  sqlite3_set_authorizer(raw, &QueryGuard::authorize, &guard);
  auto stmt = prepareOneStatement(raw, sql, &guard);
  if (!stmt.ok()) return stmt.status();
  sqlite3_stmt* s = stmt->get();
  if (!sqlite3_stmt_readonly(s)) return Status::Error(kReadOnlyRefusal);
  QueryResult result;
  int ncol = sqlite3_column_count(s);
  for (int c = 0; c < ncol; ++c) result.columns.push_back(sqlite3_column_name(s, c));
  result.numeric.assign(ncol, false);
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    std::vector<std::optional<std::string>> row;
    for (int c = 0; c < ncol; ++c) {
      int type = sqlite3_column_type(s, c);
      if (result.rows.empty()) result.numeric[c] = type == SQLITE_INTEGER || type == SQLITE_FLOAT;
      if (type == SQLITE_NULL) row.emplace_back(std::nullopt);
      else row.emplace_back(columnText(s, c));
    }
    result.rows.push_back(std::move(row));
  }
  if (rc != SQLITE_DONE) return Status::Error("SQL error: " + sqlite::errorOf(raw));
  return result;
}

}  // namespace nanprov
