#include "store/budget_keeper.h"

#include <algorithm>
#include <filesystem>
#include <iterator>
#include <span>
#include <utility>

#include "store/call_signature.h"
#include "store/run_counters_meta.h"
#include "store/schema.h"
#include "store/sqlite_rows.h"

namespace nanprov::store {
namespace {

// What a row costs on disk, with its b-tree cell: a clean call (integers, two timestamps, one
// float32 per tensor) and a summary row (integers and up to ten doubles). Measured with
// nanprov-store-bench; the live-bytes check below corrects for any error.
constexpr int64_t kCallRowBytes = 100;
constexpr int64_t kSummaryRowBytes = 96;
// An empty store: a page or two for each table and index (4 KiB pages). The shares split the rest.
constexpr int64_t kEmptyStoreBytes = 96 << 10;

// The summary's maxima columns, in Role order (store/schema.h).
const std::span<const char* const> kRoleColumns(kStepSummaryColumns + 7, kRoleCount);
static_assert(std::size(kStepSummaryColumns) == 7 + kRoleCount + 1, "a maximum column for every role, then not_clean");

// The first steps that held a call that was not clean stay in full, each with the step before it
// (the report walks back from an edge to the forward before it): the edge and how it spread. A
// run that stays non-finite past them (training on after a NaN, AMP's skipped steps) has its
// later steps summarised like clean ones, their counts kept, so no run outgrows its budget.
constexpr size_t kEdgeStepsKept = 8;

// A call of the step being summarised, held by nothing else (no capture, no traced kernel).
const std::string kHeldByNothing =
    " FROM calls WHERE calls.seq BETWEEN ?1 AND ?2 AND calls.step = ?3"
    " AND NOT EXISTS (SELECT 1 FROM captures p WHERE p.seq = calls.seq)"
    " AND NOT EXISTS (SELECT 1 FROM kernels k WHERE k.seq = calls.seq)";
// A plain clean call (its maxima in calls.max_abs), or one stored with tensor rows: not clean, or
// clean with a detail the compact form lacks (fully masked rows, an all-zero tensor).
const std::string kPrunable = kHeldByNothing + " AND calls.health = 0 AND calls.max_abs IS NOT NULL";
const std::string kPrunableWithTensorRows = kHeldByNothing + " AND calls.max_abs IS NULL";

// Merges a row into its bucket: counts add, maxima take the larger (NULL: the role was absent).
std::string upsertSql() {
  std::string cols, params, merge;
  for (const char* c : kRoleColumns) {
    cols += std::string(",") + c;
    params += ",?";
    merge += std::string(",") + c + "=CASE WHEN " + c + " IS NULL OR excluded." + c + " > " + c + " THEN excluded." +
             c + " ELSE " + c + " END";
  }
  return "INSERT INTO step_summaries(step,last_step,layer,phase,calls,first_seq,last_seq" + cols +
         ",not_clean) VALUES(?,?,?,?,?,?,?" + params +
         ",?) ON CONFLICT(step,layer,phase) DO UPDATE SET last_step=MAX(last_step,excluded.last_step),"
         "calls=calls+excluded.calls,first_seq=MIN(first_seq,excluded.first_seq),last_seq=MAX(last_seq,excluded.last_"
         "seq)," +
         "not_clean=not_clean+excluded.not_clean" + merge;
}

Status run(sqlite3* db, sqlite3_stmt* s) {
  int rc = sqlite3_step(s);
  sqlite3_reset(s);
  return rc == SQLITE_DONE || rc == SQLITE_ROW ? Status::Ok() : Status::Error(sqlite::errorOf(db));
}

int64_t pragmaInteger(sqlite3* db, const char* pragma) {
  auto st = sqlite::prepare(db, std::string("PRAGMA ") + pragma);
  if (!st.ok() || sqlite3_step(st->get()) != SQLITE_ROW) return 0;
  return sqlite3_column_int64(st->get(), 0);
}

}  // namespace

BudgetKeeper::BudgetKeeper(std::string path, int64_t budget_bytes)
    : path_(std::move(path)), budget_(std::max<int64_t>(0, budget_bytes)) {
  ring_calls_limit_ = share(shares_.ring) / kCallRowBytes;
}

int64_t BudgetKeeper::chunkCalls() const {
  // A call not clean weighs itself and a row per tensor (up to a dozen roles: hand-written
  // attention adds S and P): a chunk at most an eighth of the ring's share.
  constexpr int64_t kRowsOfTheHeaviestCall = 13;
  return std::max<int64_t>(16, share(shares_.ring) / kCallRowBytes / kRowsOfTheHeaviestCall / 8);
}

int64_t BudgetKeeper::walBytes() const { return std::max<int64_t>(16 << 10, share(shares_.wal)); }

int64_t BudgetKeeper::share(double fraction) const {
  return static_cast<int64_t>(static_cast<double>(std::max<int64_t>(0, budget_ - kEmptyStoreBytes)) * fraction);
}

Status BudgetKeeper::configure(sqlite3* db) {
  if (!on()) return Status::Ok();
  const int64_t wal_bytes = walBytes();
  const int64_t page = std::max<int64_t>(512, pragmaInteger(db, "page_size"));
  // A checkpoint once the WAL holds its share, and the WAL file cut back to it afterwards (it
  // otherwise keeps its largest size).
  return sqlite::exec(db, "PRAGMA wal_autocheckpoint=" + std::to_string(std::max<int64_t>(4, wal_bytes / page / 2)) +
                              "; PRAGMA journal_size_limit=" + std::to_string(wal_bytes) +
                              "; PRAGMA temp_store=MEMORY;");
}

void BudgetKeeper::noteCall(int64_t seq, int64_t step, int64_t tensor_rows) {
  if (!on()) return;
  auto [it, fresh] = full_.try_emplace(step, StepSpan{seq, seq, 0});
  it->second.first_seq = std::min(it->second.first_seq, seq);
  it->second.last_seq = std::max(it->second.last_seq, seq);
  // A tensor row costs about what a clean call's row does: a call that was not clean weighs more.
  it->second.calls += 1 + tensor_rows;
}

int64_t BudgetKeeper::liveBytes(sqlite3* db) const {
  std::error_code ec;
  auto wal = std::filesystem::file_size(path_ + "-wal", ec);
  const int64_t wal_bytes = ec ? 0 : static_cast<int64_t>(wal);
  return (pragmaInteger(db, "page_count") - pragmaInteger(db, "freelist_count")) * pragmaInteger(db, "page_size") +
         wal_bytes;
}

StatusOr<bool> BudgetKeeper::keptForAnEdge(sqlite3* db, int64_t step) {
  // Through the index over calls that are not clean; fixed once there are enough of them (the
  // calls of those steps are never summarised, so the answer cannot change).
  if (edge_steps_.size() < kEdgeStepsKept) {
    NANPROV_ASSIGN_OR_RETURN(sqlite::Stmt st,
                             sqlite::prepare(db,
                                             "SELECT DISTINCT step FROM calls WHERE health != 0 ORDER BY "
                                             "step LIMIT " +
                                                 std::to_string(kEdgeStepsKept)));
    edge_steps_.clear();
    int rc;
    while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) edge_steps_.insert(sqlite3_column_int64(st.get(), 0));
    if (rc != SQLITE_DONE) return Status::Error(sqlite::errorOf(db));
  }
  return edge_steps_.count(step) > 0 || edge_steps_.count(step + 1) > 0;
}

StatusOr<const std::vector<Role>*> BudgetKeeper::rolesOf(sqlite3* db, int64_t sig) {
  if (auto it = roles_.find(sig); it != roles_.end()) return &it->second;
  NANPROV_ASSIGN_OR_RETURN(sqlite::Stmt st, sqlite::prepare(db, "SELECT tensors FROM signatures WHERE id = ?"));
  sqlite::bindRow(st.get(), sig);
  if (sqlite3_step(st.get()) != SQLITE_ROW)
    return Status::Error("a call's signature " + std::to_string(sig) + " is missing");
  std::vector<Role>& roles = roles_[sig];
  for (const TensorHealth& t : tensorsFromDescription(columnText(st.get(), 0))) roles.push_back(t.role);
  return &roles;
}

Status BudgetKeeper::summarise(sqlite3* db, int64_t step, const StepSpan& span) {
  NANPROV_ASSIGN_OR_RETURN(const bool kept, keptForAnEdge(db, step));
  if (kept) return Status::Ok();
  if (!select_) {
    NANPROV_ASSIGN_OR_RETURN(select_, sqlite::prepare(db, "SELECT seq, layer, phase, sig, max_abs" + kPrunable));
    NANPROV_ASSIGN_OR_RETURN(erase_, sqlite::prepare(db, "DELETE" + kPrunable));
    NANPROV_ASSIGN_OR_RETURN(upsert_, sqlite::prepare(db, upsertSql()));
    NANPROV_ASSIGN_OR_RETURN(
        select_detailed_,
        sqlite::prepare(db,
                        "SELECT calls.seq, calls.layer, calls.phase, calls.health, t.role, t.max_abs, t.numel, t.nan + "
                        "t.posinf + t.neginf"
                        " FROM tensors t JOIN calls ON calls.seq = t.seq WHERE t.seq IN (SELECT calls.seq" +
                            kPrunableWithTensorRows + ") ORDER BY calls.seq"));
    NANPROV_ASSIGN_OR_RETURN(
        erase_detailed_tensors_,
        sqlite::prepare(db, "DELETE FROM tensors WHERE seq IN (SELECT calls.seq" + kPrunableWithTensorRows + ")"));
    NANPROV_ASSIGN_OR_RETURN(erase_detailed_, sqlite::prepare(db, "DELETE" + kPrunableWithTensorRows));
  }
  std::map<std::pair<int64_t, std::string>, Summary> rows;
  sqlite::bindRow(select_.get(), span.first_seq, span.last_seq, step);
  int rc;
  while ((rc = sqlite3_step(select_.get())) == SQLITE_ROW) {
    sqlite3_stmt* s = select_.get();
    int64_t seq = 0, layer = 0, sig = 0;
    std::string phase;
    sqlite::readRow(s, 0, seq, layer, phase, sig);
    auto roles = rolesOf(db, sig);
    if (!roles.ok()) break;
    std::vector<TensorHealth> tensors((*roles)->size());
    if (!fillMaxAbs(sqlite3_column_blob(s, 4), static_cast<size_t>(sqlite3_column_bytes(s, 4)), tensors)) continue;
    Summary& sum = rows[{layer, phase}];
    sum.first_seq = sum.calls ? std::min(sum.first_seq, seq) : seq;
    sum.last_seq = std::max(sum.last_seq, seq);
    ++sum.calls;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const int r = static_cast<int>((**roles)[i]);
      sum.max_abs[r] = sum.seen[r] ? std::max(sum.max_abs[r], tensors[i].max_abs) : tensors[i].max_abs;
      sum.seen[r] = true;
    }
  }
  sqlite3_reset(select_.get());
  if (rc != SQLITE_DONE) return Status::Error(sqlite::errorOf(db));
  NANPROV_RETURN_IF_ERROR(summariseWithTensorRows(db, step, span, &rows));
  // A step joins the newest bucket until that bucket spans `every_` steps. A step older than that
  // bucket (its calls reached the writer after newer steps' were summarised) gets rows of its own:
  // a row's range must hold only the steps of its calls, as the trends and readers take it.
  const bool late = bucket_start_ >= 0 && step < bucket_start_;
  if (!late && (bucket_start_ < 0 || step >= bucket_start_ + every_)) bucket_start_ = step;
  const int64_t row_start = late ? step : bucket_start_;
  // Rows counted as they open a bucket (a later step joining one rarely adds a row); thin() recounts.
  if (row_start == step) summary_rows_ += static_cast<int64_t>(rows.size());
  for (const auto& [key, sum] : rows) {
    sqlite3_stmt* s = upsert_.get();
    sqlite::bindRow(s, row_start, step, key.first, key.second, sum.calls, sum.first_seq, sum.last_seq);
    for (int r = 0; r < kRoleCount; ++r) {
      if (sum.seen[r]) sqlite3_bind_double(s, 8 + r, sum.max_abs[r]);
      else sqlite3_bind_null(s, 8 + r);
    }
    sqlite3_bind_int64(s, 8 + kRoleCount, sum.not_clean);
    NANPROV_RETURN_IF_ERROR(run(db, s));
    sqlite3_clear_bindings(s);
    summarised_calls_ += sum.calls;
    summarised_not_clean_ += sum.not_clean;
  }
  sqlite::bindRow(erase_.get(), span.first_seq, span.last_seq, step);
  NANPROV_RETURN_IF_ERROR(run(db, erase_.get()));
  return Status::Ok();
}

// The step's calls stored with tensor rows (not clean, past the first edge steps; or clean with
// fully masked rows or an all-zero tensor): counted into `rows` with the largest finite |x| of each
// role, then their rows and tensor rows deleted.
Status BudgetKeeper::summariseWithTensorRows(sqlite3* db, int64_t step, const StepSpan& span,
                                             std::map<std::pair<int64_t, std::string>, Summary>* rows) {
  sqlite3_stmt* s = select_detailed_.get();
  sqlite::bindRow(s, span.first_seq, span.last_seq, step);
  int64_t last_seq = -1;
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    int64_t seq = 0, layer = 0, health = 0, numel = 0, nonfinite = 0;
    std::string phase, role;
    double max_abs = 0;
    sqlite::readRow(s, 0, seq, layer, phase, health, role, max_abs, numel, nonfinite);
    Summary& sum = (*rows)[{layer, phase}];
    if (seq != last_seq) {  // the first of the call's tensor rows
      sum.first_seq = sum.calls ? std::min(sum.first_seq, seq) : seq;
      sum.last_seq = std::max(sum.last_seq, seq);
      ++sum.calls;
      if (health != 0) ++sum.not_clean;
      last_seq = seq;
    }
    std::optional<Role> r = parseRole(role);
    if (!r || nonfinite >= numel) continue;  // a tensor with no finite value has no largest
    const int i = static_cast<int>(*r);
    sum.max_abs[i] = sum.seen[i] ? std::max(sum.max_abs[i], max_abs) : max_abs;
    sum.seen[i] = true;
  }
  sqlite3_reset(s);
  if (rc != SQLITE_DONE) return Status::Error(sqlite::errorOf(db));
  for (sqlite3_stmt* erase : {erase_detailed_tensors_.get(), erase_detailed_.get()}) {
    sqlite::bindRow(erase, span.first_seq, span.last_seq, step);
    NANPROV_RETURN_IF_ERROR(run(db, erase));
  }
  return Status::Ok();
}

Status BudgetKeeper::thin(sqlite3* db) {
  every_ *= 2;
  std::string maxima;
  for (const char* c : kRoleColumns) maxima += std::string(", MAX(") + c + ")";
  // Neighbouring buckets merge in pairs: keyed by their first step, counts summed, maxima kept.
  const std::string bucket = "(step - (SELECT MIN(step) FROM step_summaries)) / " + std::to_string(every_);
  NANPROV_RETURN_IF_ERROR(sqlite::exec(db,
                                       "CREATE TEMP TABLE thinned AS SELECT MIN(step) AS step, MAX(last_step) AS "
                                       "last_step, layer, phase, SUM(calls) AS calls, "
                                       "MIN(first_seq) AS first_seq, MAX(last_seq) AS last_seq" +
                                           maxima + ", SUM(not_clean) AS not_clean FROM step_summaries GROUP BY " +
                                           bucket +
                                           ", layer, phase; DELETE FROM step_summaries; INSERT INTO step_summaries "
                                           "SELECT * FROM thinned; DROP TABLE thinned;"));
  // The steps table thins with them: of the steps they stand for, each row's last step keeps its
  // end (a stretch of them ends there in a trace; the step before a stretch is another row's last,
  // or a step held in full), and so does every step whose calls are held. The rest are counted.
  NANPROV_RETURN_IF_ERROR(sqlite::exec(
      db,
      "DELETE FROM steps WHERE step >= (SELECT MIN(step) FROM step_summaries) AND step <= (SELECT MAX(last_step) FROM "
      "step_summaries) AND step NOT IN (SELECT last_step FROM step_summaries) AND step NOT IN (SELECT step FROM "
      "calls)"));
  steps_thinned_ += sqlite3_changes(db);
  bucket_start_ = -1;
  NANPROV_ASSIGN_OR_RETURN(sqlite::Stmt st, sqlite::prepare(db, "SELECT COUNT(*), MAX(step) FROM step_summaries"));
  if (sqlite3_step(st.get()) == SQLITE_ROW) {
    summary_rows_ = sqlite3_column_int64(st.get(), 0);
    if (sqlite3_column_type(st.get(), 1) != SQLITE_NULL) bucket_start_ = sqlite3_column_int64(st.get(), 1);
  }
  return Status::Ok();
}

Status BudgetKeeper::stepEnded(sqlite3* db) {
  if (!on()) return Status::Ok();
  Status pruned = prune(db);
  // The WAL keeps its largest size until a checkpoint restarts it: past its share, fold it back
  // now (the writer thread's time, a few pages), so the batch and prune of one step is its most.
  std::error_code ec;
  const auto wal = std::filesystem::file_size(path_ + "-wal", ec);
  // A checkpoint that fails (busy, a full disk) leaves the WAL as it was: tried again next step.
  if (!ec && static_cast<int64_t>(wal) > walBytes()) sqlite::exec(db, "PRAGMA wal_checkpoint(TRUNCATE);").ignore();
  return pruned;
}

Status BudgetKeeper::prune(sqlite3* db) {
  // The first steps stay in full, up to their share (at least one step). The newest step may
  // still be running: only steps before it are decided.
  const int64_t first_limit = share(shares_.first_steps) / kCallRowBytes;
  while (!first_steps_done_ && full_.size() > 1) {
    auto oldest = full_.begin();
    if (first_calls_ > 0 && first_calls_ + oldest->second.calls > first_limit) {
      first_steps_done_ = true;
      break;
    }
    first_calls_ += oldest->second.calls;
    full_.erase(oldest);
  }
  // Freed pages are reused, so the file stops growing once the rows it holds stop growing; past
  // the high-water mark the ring gives up a quarter of its share.
  // At most once a step: a burst written in chunks prunes many times within one step.
  const int64_t newest = full_.empty() ? -1 : full_.rbegin()->first;
  if (newest > shrunk_at_step_ &&
      liveBytes(db) > static_cast<int64_t>(static_cast<double>(budget_) * shares_.high_water)) {
    ring_calls_limit_ = std::max<int64_t>(1, ring_calls_limit_ * 3 / 4);
    shrunk_at_step_ = newest;
  }
  int64_t held = 0;
  for (const auto& [step, span] : full_) held += span.calls;
  if (held <= ring_calls_limit_ || full_.size() <= 2) return Status::Ok();
  sqlite::Transaction tx(db);
  NANPROV_RETURN_IF_ERROR(tx.begin());
  // The ring: the newest steps within its share, and at least the two newest (an edge in the
  // newest keeps the one before it).
  while (full_.size() > 2 && held > ring_calls_limit_) {
    auto oldest = full_.begin();
    NANPROV_RETURN_IF_ERROR(summarise(db, oldest->first, oldest->second));
    held -= oldest->second.calls;
    full_.erase(oldest);
  }
  const int64_t summary_limit = share(shares_.summaries) / kSummaryRowBytes;
  if (summary_rows_ > summary_limit) NANPROV_RETURN_IF_ERROR(thin(db));
  // Running totals, so a reader of a thousand ranks needs no scan of their summaries.
  NANPROV_RETURN_IF_ERROR(
      writeCounters(db, RunCounters{.summarised = BudgetSummaries{.calls = summarised_calls_,
                                                                  .not_clean = summarised_not_clean_,
                                                                  .every = every_,
                                                                  .steps_thinned = steps_thinned_}}));
  return tx.commit();
}

}  // namespace nanprov::store
