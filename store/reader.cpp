#include "store/reader.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

#include "base/numbers.h"
#include "store/call_signature.h"
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

// The calls of one store, with their tensors, ordered by seq: every call, or those of `seqs`.
// Compact rows get their tensors back from the signature and the stored max |x|.
// Which calls of a store to read: all, those of a list of seqs, or those that are not clean
// (through the index over them).
struct CallFilter {
  std::string calls;  // condition on `c`, the calls table; empty: every call
  std::string list;   // of(): the seqs, comma-separated
  static CallFilter all() { return {}; }
  static CallFilter notClean() { return {"c.health != 0", ""}; }
  static CallFilter of(const std::vector<int64_t>& seqs) {
    std::string list;
    for (int64_t seq : seqs) list += (list.empty() ? "" : ",") + std::to_string(seq);
    return {"c.seq IN (" + list + ")", list};
  }
};

Status loadCalls(sqlite3* db, const std::string& path, const CallFilter& filter, std::vector<CallRecord>* out) {
  auto calls = sqlite::prepare(db,
      "SELECT c.seq,c.rank,c.step,c.layer,c.call,c.phase,IFNULL(c.fwd_seq,-1),s.op,s.backend,IFNULL(s.module,''),"
      "c.start_ns,c.end_ns,IFNULL(c.injected,''),s.device,IFNULL(n.text,''),c.recompute,c.health,c.max_abs,s.tensors,"
      "c.detail,c.sig "
      "FROM calls c JOIN signatures s ON s.id = c.sig LEFT JOIN notes n ON n.id = c.note" +
      // Every call comes in rowid (seq) order; a filtered read comes in its index's order and is sorted here.
      (filter.calls.empty() ? std::string(" ORDER BY c.seq") : " WHERE " + filter.calls));
  if (!calls.ok()) return notAStore(path, calls.status().message());

  size_t first = out->size();
  std::vector<int64_t> from_rows;  // calls whose tensors come from the tensors table
  std::unordered_map<int64_t, std::vector<TensorHealth>> described;  // signature id → its tensors, parsed once
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
    c.health = sqlite3_column_int(s, 16);
    bool compact = sqlite3_column_type(s, 17) == SQLITE_BLOB, detailed = sqlite3_column_type(s, 19) == SQLITE_BLOB;
    if (compact || detailed) {
      auto known = described.find(sqlite3_column_int64(s, 20));
      if (known == described.end()) {
        known = described.emplace(sqlite3_column_int64(s, 20), tensorsFromDescription(columnText(s, 18))).first;
      }
      c.tensors = known->second;
      int col = compact ? 17 : 19;
      const void* blob = sqlite3_column_blob(s, col);
      size_t bytes = static_cast<size_t>(sqlite3_column_bytes(s, col));
      if (!(compact ? fillMaxAbs(blob, bytes, c.tensors) : fillDetail(blob, bytes, c.tensors))) {
        return notAStore(path, "call " + std::to_string(c.seq) + " has tensor health that does not fit its signature");
      }
    } else {
      from_rows.push_back(c.seq);
    }
    out->push_back(std::move(c));
  }
  if (rc != SQLITE_DONE) return notAStore(path, sqlite::errorOf(db));
  std::sort(out->begin() + static_cast<std::ptrdiff_t>(first), out->end(),
            [](const CallRecord& a, const CallRecord& b) { return a.seq < b.seq; });
  std::sort(from_rows.begin(), from_rows.end());

  if (from_rows.empty()) return Status::Ok();
  auto tensors = sqlite::prepare(db,
      "SELECT seq,role,dtype,shape,numel,nan,posinf,neginf,max_abs,all_zero,IFNULL(masked_rows,-1) FROM tensors" +
      (from_rows.size() == static_cast<size_t>(out->size() - first) && filter.calls.empty()
           ? std::string()
           : " WHERE seq IN (" + CallFilter::of(from_rows).list + ")") +
      " ORDER BY seq, rowid");  // rowid keeps the probes' role order
  if (!tensors.ok()) return notAStore(path, tensors.status().message());
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

// One integer from a query with bound integer parameters, or nullopt when it gives no row.
StatusOr<std::optional<int64_t>> queryInteger(sqlite3* db, const std::string& sql, std::initializer_list<int64_t> args) {
  auto st = sqlite::prepare(db, sql);
  if (!st.ok()) return st.status();
  int i = 1;
  for (int64_t a : args) sqlite3_bind_int64(st->get(), i++, a);
  int rc = sqlite3_step(st->get());
  if (rc == SQLITE_ROW && sqlite3_column_type(st->get(), 0) != SQLITE_NULL) {
    return std::optional<int64_t>(sqlite3_column_int64(st->get(), 0));
  }
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) return Status::Error(sqlite::errorOf(db));
  return std::optional<int64_t>();
}

// The forward call before `seq` in its step on this rank, not a recompute: walked back by seq,
// which grows with time on a rank, until the step changes.
StatusOr<std::optional<int64_t>> previousForward(sqlite3* db, int64_t seq, int64_t step) {
  auto st = sqlite::prepare(db, "SELECT seq, step, phase, recompute FROM calls WHERE seq < ? ORDER BY seq DESC");
  if (!st.ok()) return st.status();
  sqlite3_bind_int64(st->get(), 1, seq);
  while (sqlite3_step(st->get()) == SQLITE_ROW) {
    if (sqlite3_column_int64(st->get(), 1) != step) break;
    if (columnText(st->get(), 2) == "fwd" && sqlite3_column_int(st->get(), 3) == 0) {
      return std::optional<int64_t>(sqlite3_column_int64(st->get(), 0));
    }
  }
  return std::optional<int64_t>();
}

// What the report reads of one store: its first call that is not clean and its first source
// edge (through the index over calls that are not clean), the call before each in its step, for
// the input trail, and on CUDA the newest traced call of the same signature, layer and phase, for
// kernels; plus the totals over calls that are not clean.
Status loadEdges(sqlite3* db, const std::string& path, RunData* run, std::vector<int64_t>* loaded) {
  std::vector<int64_t> seqs;
  auto add = [&](StatusOr<std::optional<int64_t>> found) {
    if (found.ok() && *found) seqs.push_back(**found);
    return found.ok() ? Status::Ok() : notAStore(path, found.status().message());
  };
  const std::string by_time = " ORDER BY step, start_ns, seq LIMIT 1";
  NANPROV_RETURN_IF_ERROR(add(queryInteger(db, "SELECT seq FROM calls WHERE health != 0" + by_time, {})));
  NANPROV_RETURN_IF_ERROR(add(queryInteger(db, "SELECT seq FROM calls WHERE health != 0 AND health = 1" + by_time, {})));
  std::vector<int64_t> edges = seqs;
  for (int64_t seq : edges) {
    auto step = queryInteger(db, "SELECT step FROM calls WHERE seq = ?", {seq});
    if (!step.ok() || !*step) return notAStore(path, "a call vanished while it was read");
    NANPROV_RETURN_IF_ERROR(add(previousForward(db, seq, **step)));
    // Only the traced calls (the kernels table's) are candidates: a few steps' worth, looked up by seq.
    auto untraced_cuda = queryInteger(db,
        "SELECT c.seq FROM calls c JOIN signatures s ON s.id = c.sig WHERE c.seq = ? AND s.device != 'cpu' "
        "AND NOT EXISTS (SELECT 1 FROM kernels WHERE kernels.seq = c.seq)", {seq});
    if (!untraced_cuda.ok()) return notAStore(path, untraced_cuda.status().message());
    if (!*untraced_cuda) continue;
    NANPROV_RETURN_IF_ERROR(add(queryInteger(db,
        "SELECT d.seq FROM calls d, calls c WHERE c.seq = ? AND d.seq IN (SELECT DISTINCT seq FROM kernels) "
        "AND d.sig = c.sig AND d.layer = c.layer AND d.phase = c.phase ORDER BY d.seq DESC LIMIT 1", {seq})));
  }
  std::sort(seqs.begin(), seqs.end());
  seqs.erase(std::unique(seqs.begin(), seqs.end()), seqs.end());
  if (!seqs.empty()) NANPROV_RETURN_IF_ERROR(loadCalls(db, path, CallFilter::of(seqs), &run->calls));
  *loaded = seqs;
  auto count = queryInteger(db, "SELECT COUNT(*) FROM calls WHERE health != 0", {});
  if (!count.ok()) return notAStore(path, count.status().message());
  run->not_clean.calls += **count;
  auto layers = sqlite::prepare(db, "SELECT DISTINCT layer FROM calls WHERE health != 0");
  if (!layers.ok()) return notAStore(path, layers.status().message());
  while (sqlite3_step(layers->get()) == SQLITE_ROW) run->not_clean.layers.insert(sqlite3_column_int64(layers->get(), 0));
  return Status::Ok();
}

// The kernels of one store, or of the calls `seqs` only.
Status loadKernels(sqlite3* db, const std::string& path, int rank, const std::vector<int64_t>* seqs,
                   std::vector<KernelRecord>* out) {
  if (seqs && seqs->empty()) return Status::Ok();
  auto kernels = sqlite::prepare(db,
      "SELECT seq,correlation_id,name,grid_x,grid_y,grid_z,block_x,block_y,block_z,start_ns,end_ns,"
      "device,stream FROM kernels" + (seqs ? " WHERE seq IN (" + CallFilter::of(*seqs).list + ")" : std::string()) +
      " ORDER BY seq, start_ns, rowid");
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

// The calls a store holds, from the writer's running count (no scan).
static int64_t callsWritten(const RankInfo& info) {
  auto it = info.meta.find("calls_written");
  auto n = it == info.meta.end() ? std::optional<int64_t>(0) : parseInteger(it->second, 0, INT64_MAX);
  return n ? *n : 0;
}

StatusOr<RunData> loadRun(const std::string& dir, RunScope scope) {
  RunData run;
  run.dir = dir;
  run.scope = scope;
  std::vector<std::string> paths = rankStorePaths(dir);
  if (paths.empty() && isRunDir(dir)) return run;
  if (paths.empty()) return storesOf(dir).status();
  for (const std::string& path : paths) {
    RankInfo info;
    auto db = openRankStore(path, &info);
    if (!db.ok()) return db.status();
    if (scope == RunScope::kEdges) {
      std::vector<int64_t> loaded;
      int64_t not_clean_before = run.not_clean.calls;
      NANPROV_RETURN_IF_ERROR(loadEdges(db->get(), path, &run, &loaded));
      if (run.not_clean.calls > not_clean_before) run.not_clean.ranks.insert(info.rank);
      NANPROV_RETURN_IF_ERROR(loadKernels(db->get(), path, info.rank, &loaded, &run.kernels));
      run.total_calls += callsWritten(info);
    } else if (scope == RunScope::kNotClean) {
      NANPROV_RETURN_IF_ERROR(loadCalls(db->get(), path, CallFilter::notClean(), &run.calls));
      run.total_calls += callsWritten(info);
    } else {
      size_t before = run.calls.size();
      NANPROV_RETURN_IF_ERROR(loadCalls(db->get(), path, CallFilter::all(), &run.calls));
      NANPROV_RETURN_IF_ERROR(loadKernels(db->get(), path, info.rank, nullptr, &run.kernels));
      run.total_calls += static_cast<int64_t>(run.calls.size() - before);
    }
    NANPROV_RETURN_IF_ERROR(loadCaptures(db->get(), path, info.rank, &run.captures));
    NANPROV_RETURN_IF_ERROR(loadSentinel(db->get(), path, info.rank, &run.sentinel));
    info.steps = countSteps(db->get());
    run.ranks.push_back(std::move(info));
  }
  // A CPU call's kernel is its ATen op, timed by the call itself; stores do not repeat it.
  for (const CallRecord& c : run.calls) {
    if (c.device != "cpu" || scope == RunScope::kNotClean) continue;
    KernelRecord k;
    k.rank = c.rank;
    k.seq = c.seq;
    k.name = c.op;
    k.start_ns = c.start_ns;
    k.end_ns = c.end_ns;
    run.kernels.push_back(std::move(k));
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

// The tables `nanprov sql` shows, each as the SELECT that gives one rank store's rows (`calls`
// has its own rank column; the others gain one).
const std::vector<std::pair<std::string, bool>> kQueryTables = {
    {"calls", false}, {"tensors", true}, {"kernels", true}, {"captures", true},
    {"steps", true},  {"meta", true},    {"sentinel", true}};

std::string rowsOf(const std::string& table, bool add_rank, const std::string& alias, int rank) {
  // The store keeps a call's signature and note once; the table users query has them inline.
  if (table == "calls") {
    return "SELECT c.seq, c.rank, c.step, c.layer, c.call, c.phase, c.fwd_seq, c.recompute, s.op, s.backend, "
           "s.module, c.start_ns, c.end_ns, c.injected, s.device, n.text AS unattributed, "
           "CASE c.health WHEN 0 THEN 'clean' WHEN 1 THEN 'source' ELSE 'propagated' END AS edge FROM " +
           alias + ".calls c JOIN " + alias + ".signatures s ON s.id = c.sig LEFT JOIN " + alias +
           ".notes n ON n.id = c.note";
  }
  return std::string("SELECT ") + (add_rank ? std::to_string(rank) + " AS rank, " : "") + "* FROM " + alias + "." + table;
}

// Attaches one rank store read-only as `alias`; its rank in *rank.
Status attachStore(sqlite3* db, const std::string& path, const std::string& alias, int* rank) {
  RankInfo info;
  auto check = openRankStore(path, &info);
  if (!check.ok()) return check.status();
  auto attach = sqlite::prepare(db, "ATTACH DATABASE ? AS " + alias);
  if (!attach.ok()) return attach.status();
  std::string uri = "file:" + path + "?mode=ro";
  sqlite3_bind_text(attach->get(), 1, uri.c_str(), -1, SQLITE_TRANSIENT);
  if (sqlite3_step(attach->get()) != SQLITE_DONE) return notAStore(path, sqlite::errorOf(db));
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
      unions[table] += (i ? " UNION ALL " : "") + rowsOf(table, add_rank, alias, rank);
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
    shapes += "CREATE TABLE " + table + " AS " + rowsOf(table, add_rank, "r0", rank) + " LIMIT 0; ";
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
        if (reads.tables.count(table)) copy += "INSERT INTO main." + table + " " + rowsOf(table, add_rank, alias, rank) + "; ";
      }
      detach += "DETACH DATABASE " + alias + "; ";
    }
    NANPROV_RETURN_IF_ERROR(sqlite::exec(db, copy + "COMMIT; " + detach));
  }
  return Status::Ok();
}

}  // namespace

StatusOr<QueryResult> queryRun(const std::string& dir, const std::string& sql) {
  auto paths = storesOf(dir);
  if (!paths.ok()) return paths.status();
  // "": a private temporary database on disk, for the copies a run of many ranks needs.
  auto db = sqlite::open("", sqlite::Mode::kReadWriteCreate);
  if (!db.ok()) return db.status();
  sqlite3* raw = db->get();
  int attachable = sqlite3_limit(raw, SQLITE_LIMIT_ATTACHED, -1);
  if (static_cast<int>(paths->size()) <= attachable) {
    NANPROV_RETURN_IF_ERROR(viewsOverStores(raw, *paths));
  } else {
    NANPROV_RETURN_IF_ERROR(tablesFromStores(raw, *paths, sql, attachable));
  }
  NANPROV_RETURN_IF_ERROR(sqlite::exec(raw, "PRAGMA query_only=ON;"));

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
