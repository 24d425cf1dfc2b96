#include "store/writer.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <mutex>
#include <optional>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "base/bounded_queue.h"
#include "base/records/call_event.h"
#include "base/text.h"
#include "store/budget_keeper.h"
#include "store/call_signature.h"
#include "store/replica_digest_rows.h"
#include "store/run_counters_meta.h"
#include "store/schema.h"
#include "store/sqlite_db.h"
#include "store/sqlite_rows.h"
#include "store/trend_keeper.h"

namespace nanprov::store {
namespace {

// A store that nobody flushes explicitly still reaches disk this often, so a hung job's
// last minutes are readable.
constexpr auto kIdleFlushPeriod = std::chrono::seconds(2);
// Beyond this many pending calls the writer is not keeping up (or failed); drop, never grow.
constexpr size_t kMaxPendingCalls = 1 << 18;
// Calls handed over without a lock (base/bounded_queue.h); past it, they wait under the lock. The
// writer drains it at every flush, and as soon as it is half full.
constexpr size_t kQueuedCalls = 2048;
constexpr size_t kMaxPendingKernels = 1 << 20;

struct StepRow {
  int64_t step;
  int64_t end_ns;
};

// Prepared statements reused for every batch.
struct Statements {
  sqlite::Stmt call, tensor, step, kernel, capture, meta, sentinel, module_check, collective, replica_digest, signature,
      note;
};

StatusOr<Statements> prepareStatements(sqlite3* db) {
  Statements st;
  const std::pair<sqlite::Stmt*, const char*> sql[] = {
      {&st.call,
       "INSERT OR REPLACE INTO calls(seq,rank,step,layer,call,phase,fwd_seq,sig,start_ns,end_ns,injected,note,"
       "recompute,health,max_abs,detail,modified,dropout_p) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"},
      {&st.signature, "INSERT INTO signatures(op,backend,module,device,tensors) VALUES(?,?,?,?,?)"},
      {&st.note, "INSERT INTO notes(text) VALUES(?)"},
      {&st.tensor,
       "INSERT OR REPLACE INTO tensors(seq,role,dtype,shape,numel,nan,posinf,neginf,max_abs,"
       "all_zero,masked_rows) VALUES(?,?,?,?,?,?,?,?,?,?,?)"},
      {&st.step, "INSERT OR REPLACE INTO steps(step,end_ns) VALUES(?,?)"},
      {&st.kernel,
       "INSERT INTO kernels(seq,correlation_id,name,grid_x,grid_y,grid_z,block_x,block_y,block_z,"
       "start_ns,end_ns,device,stream) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?)"},
      {&st.capture, "INSERT INTO captures(seq,trigger,path,bytes,skipped) VALUES(?,?,?,?,?)"},
      {&st.meta, "INSERT OR REPLACE INTO meta(key,value) VALUES(?,?)"},
      {&st.sentinel, "INSERT INTO sentinel(step,tensor,parameter,norm) VALUES(?,?,?,?)"},
      {&st.replica_digest, "INSERT INTO replica_digests(step,parameter,digest) VALUES(?,?,?)"},
      {&st.module_check,
       "INSERT INTO module_checks(step,phase,module,class,inputs_finite,nan,posinf,neginf,largest_input,ord,time_ns,"
       "gradient,unchecked,inputs) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?)"},
      {&st.collective,
       "INSERT INTO collectives(step,ord,op,grp,group_size,tensors,in_checked,in_numel,in_nan,in_posinf,in_neginf,"
       "in_max_abs,out_checked,out_numel,out_nan,out_posinf,out_neginf,out_max_abs,time_ns) "
       "VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"},
  };
  for (const auto& [stmt, text] : sql) {
    NANPROV_ASSIGN_OR_RETURN(*stmt, sqlite::prepare(db, text));
  }
  return st;
}

Status stepStatement(sqlite3* db, sqlite3_stmt* s) {
  int rc = sqlite3_step(s);
  sqlite3_reset(s);
  sqlite3_clear_bindings(s);
  return rc == SQLITE_DONE ? Status::Ok() : Status::Error(sqlite::errorOf(db));
}

// Texts stored once per store (signatures, notes), by their id there. Used by the writer thread only.
struct Interned {
  std::unordered_map<std::string, int64_t> signatures, notes;
};

// The id of `key` in `table`, inserting it (through `insert`, already bound but for nothing) the first time.
StatusOr<int64_t> intern(sqlite3* db, std::unordered_map<std::string, int64_t>& ids, const std::string& key,
                         sqlite3_stmt* insert) {
  if (auto it = ids.find(key); it != ids.end()) {
    sqlite3_reset(insert);
    sqlite3_clear_bindings(insert);
    return it->second;
  }
  NANPROV_RETURN_IF_ERROR(stepStatement(db, insert));
  int64_t id = sqlite3_last_insert_rowid(db);
  ids.emplace(key, id);
  return id;
}

StatusOr<int64_t> signatureOf(sqlite3* db, Statements& st, Interned& interned, const CallRecord& c) {
  sqlite3_stmt* s = st.signature.get();
  std::string key = signatureKey(c);
  if (!interned.signatures.count(key)) {
    sqlite::bindRow(s, c.op, c.backend, sqlite::nullIfEmpty(c.module), c.device.name(), tensorsDescription(c));
  }
  return intern(db, interned.signatures, key, s);
}

Status insertCall(sqlite3* db, Statements& st, Interned& interned, const CallRecord& c) {
  NANPROV_ASSIGN_OR_RETURN(const int64_t sig, signatureOf(db, st, interned, c));
  std::optional<int64_t> note;
  if (!c.unattributed.empty()) {
    if (!interned.notes.count(c.unattributed)) sqlite::bindRow(st.note.get(), c.unattributed);
    NANPROV_ASSIGN_OR_RETURN(note, intern(db, interned.notes, c.unattributed, st.note.get()));
  }
  bool compact = storedCompactly(c);
  sqlite3_stmt* s = st.call.get();
  sqlite::bindRow(s, c.seq, c.rank, c.step, c.layer, c.call, phaseName(c.phase), sqlite::nullIfNegative(c.fwd_seq), sig,
                  c.start_ns, c.end_ns, sqlite::nullIfEmpty(c.injected), note, c.recompute, c.health);
  std::string blob = compact ? maxAbsBlob(c) : "";
  if (compact) sqlite3_bind_blob(s, 15, blob.data(), static_cast<int>(blob.size()), SQLITE_TRANSIENT);
  else sqlite3_bind_null(s, 15);
  // A call that is not clean also keeps its tensor rows (for nanprov sql), but readers take its
  // health from this one blob: reading rows of millions of propagated calls was the slow part.
  std::string detail = !compact && describable(c) ? detailBlob(c) : "";
  if (!detail.empty()) sqlite3_bind_blob(s, 16, detail.data(), static_cast<int>(detail.size()), SQLITE_TRANSIENT);
  else sqlite3_bind_null(s, 16);
  if (!c.modified.empty())
    sqlite3_bind_text(s, 17, c.modified.c_str(), static_cast<int>(c.modified.size()), SQLITE_TRANSIENT);
  else sqlite3_bind_null(s, 17);
  if (c.dropout_p) sqlite3_bind_double(s, 18, *c.dropout_p);
  else sqlite3_bind_null(s, 18);
  NANPROV_RETURN_IF_ERROR(stepStatement(db, s));
  if (compact) return Status::Ok();
  for (const TensorHealth& t : c.tensors) {
    sqlite3_stmt* ts = st.tensor.get();
    sqlite::bindRow(ts, c.seq, std::string(roleName(t.role)), std::string(t.dtype.c_str()), t.shape.text(), t.numel,
                    t.nan, t.posinf, t.neginf, t.max_abs, t.all_zero, sqlite::nullIfNegative(t.masked_rows));
    NANPROV_RETURN_IF_ERROR(stepStatement(db, ts));
  }
  return Status::Ok();
}

Status insertKernel(sqlite3* db, Statements& st, const KernelRecord& k) {
  sqlite3_stmt* s = st.kernel.get();
  sqlite::bindRow(s, k.seq, k.correlation_id, k.name, k.grid[0], k.grid[1], k.grid[2], k.block[0], k.block[1],
                  k.block[2], k.start_ns, k.end_ns, k.device, k.stream);
  return stepStatement(db, s);
}

Status insertCapture(sqlite3* db, Statements& st, const CaptureRecord& c) {
  sqlite3_stmt* s = st.capture.get();
  sqlite::bindRow(s, c.seq, captureTriggerName(c.trigger), sqlite::nullIfEmpty(c.path), c.bytes,
                  sqlite::nullIfEmpty(c.skipped));
  return stepStatement(db, s);
}

Status insertSentinel(sqlite3* db, Statements& st, const SentinelRecord& f) {
  sqlite3_stmt* s = st.sentinel.get();
  sqlite::bindRow(s, f.step, sentinelTensorName(f.tensor), f.parameter, f.norm);  // SQLite stores a NaN norm as NULL
  return stepStatement(db, s);
}

Status insertModuleCheck(sqlite3* db, Statements& st, const ModuleCheckRecord& m) {
  sqlite3_stmt* s = st.module_check.get();
  sqlite::bindRow(s, m.step, std::string(phaseName(m.phase)), m.module, m.module_class, m.inputsFinite(), m.nan,
                  m.posinf, m.neginf, m.largest_input, m.order, m.time_ns, m.gradient, joined(m.unchecked_before, "\n"),
                  std::string(moduleInputsName(m.inputs)));
  return stepStatement(db, s);
}

Status insertCollective(sqlite3* db, Statements& st, const CollectiveRecord& c) {
  sqlite3_stmt* s = st.collective.get();
  const CollectiveSide& i = c.input;
  const CollectiveSide& o = c.output;
  sqlite::bindRow(s, c.step, c.ord, c.op, c.group, c.group_size, c.tensors, i.checked, i.numel, i.nan, i.posinf,
                  i.neginf, i.max_abs, o.checked, o.numel, o.nan, o.posinf, o.neginf, o.max_abs, c.time_ns);
  return stepStatement(db, s);
}

Status insertReplicaDigest(sqlite3* db, Statements& st, const ReplicaDigestRecord& d) {
  sqlite3_stmt* s = st.replica_digest.get();
  sqlite::bindRow(s, d.step, d.parameter, d.digest);
  return stepStatement(db, s);
}

Status insertMeta(sqlite3* db, Statements& st, const std::string& key, const std::string& value) {
  sqlite::bindRow(st.meta.get(), key, value);
  return stepStatement(db, st.meta.get());
}

}  // namespace

// Rows waiting for the writer thread; swapped out whole under the lock.
struct PendingRows {
  std::vector<CallEvent> calls;
  std::vector<KernelRecord> kernels;
  std::vector<CaptureRecord> captures;
  std::vector<SentinelRecord> sentinel;
  std::vector<ModuleCheckRecord> module_checks;
  std::vector<CollectiveRecord> collectives;
  std::vector<ReplicaDigestRecord> replica_digests;
  std::vector<StepRow> steps;
  std::map<std::string, std::string> meta;
  RunCounters counters;  // what was said since the last batch (StoreWriter::setCounters)
  bool counters_said = false;
  std::optional<int> rank;  // the rank the process learnt (StoreWriter::setRank)

  bool empty() const { return rows() == 0 && !rank; }
  size_t rows() const {
    return calls.size() + kernels.size() + captures.size() + sentinel.size() + module_checks.size() +
           collectives.size() + replica_digests.size() + steps.size() + meta.size() + (counters_said ? 1 : 0);
  }
};

struct StoreWriter::Impl {
  enum class State { kActive, kClosed };

  std::string path;
  sqlite::Db db;
  Statements statements;
  std::unique_ptr<BudgetKeeper> budget;         // writer thread only
  TrendKeeper trends;                           // writer thread only
  TrendSink on_warning;                         // called on the writer thread, after the warning committed
  std::unique_ptr<WriteFailureRecord> failure;  // noted by the writer thread (or close, after it)
  WriteFailureSink on_failure;
  int64_t newest_step = 0;  // of the calls written so far: where a batch without calls stands
  Interned interned;
  int64_t calls_written = 0;
  // The counters' rows as last committed (writer thread only): a counter said again with the same
  // value is not written again, as the probes say theirs at every step.
  std::map<std::string, std::string> counter_rows;
  int rank = -1;  // once set, every call's row carries it: events made before may carry a guess

  // Checked calls from the training threads, taken without a lock; `accepting` turns false at close.
  BoundedQueue<CallEvent> queued{kQueuedCalls};
  std::atomic<bool> accepting{true};

  mutable std::mutex mu;  // guards everything below
  std::condition_variable wake;
  PendingRows pending;
  bool flush_requested = false;
  State state = State::kActive;
  Status first_error;
  std::atomic<int64_t> dropped{0};

  std::unique_ptr<std::thread> thread;

  // Writes one batch, a failure counted as its rows dropped. Under a budget, a batch of more calls
  // than the budget keeper's chunk is written in chunks, each pruned after it, so the store never
  // holds much more than its budget between two prunes. Each chunk commits with the ends of the
  // steps its calls have passed: a kill between two chunks leaves every stored call's earlier
  // steps recorded, never calls past the steps the store counts. Called only by the writer thread,
  // or by close() after the thread was joined: the database handle has one user at a time.
  void writeBatch(PendingRows& batch) {
    // A writer behind takes the calls held aside while its queue was full before the queue's older
    // ones: written in step order, or a chunk of newer steps would be pruned with older steps'
    // calls still to come (and a step's calls would land in two summaries).
    auto byStep = [](const CallEvent& a, const CallEvent& b) {
      return std::tie(a.step, a.seq) < std::tie(b.step, b.seq);
    };
    if (!std::is_sorted(batch.calls.begin(), batch.calls.end(), byStep)) {
      std::stable_sort(batch.calls.begin(), batch.calls.end(), byStep);
    }
    const size_t chunk = budget->on() ? static_cast<size_t>(budget->chunkCalls()) : SIZE_MAX;
    if (batch.calls.size() <= chunk) return writeTransaction(batch, !batch.steps.empty());
    // The first transaction takes every row but the calls past its chunk and the later step ends:
    // the captures and kernels that hold a call in full are there before any prune looks for them.
    std::vector<CallEvent> calls = std::move(batch.calls);
    std::vector<StepRow> steps = std::move(batch.steps);
    size_t steps_taken = 0;
    for (size_t from = 0; from < calls.size(); from += chunk) {
      const bool last = calls.size() - from <= chunk;
      PendingRows part = from == 0 ? std::move(batch) : PendingRows{};
      auto first = calls.begin() + static_cast<std::ptrdiff_t>(from);
      auto end = last ? calls.end() : first + static_cast<std::ptrdiff_t>(chunk);
      int64_t reached = 0;  // the newest step a call of the chunk ran in: the steps before it ended
      for (auto it = first; it != end; ++it) reached = std::max(reached, it->step);
      while (steps_taken < steps.size() && (last || steps[steps_taken].step < reached)) {
        part.steps.push_back(steps[steps_taken++]);
      }
      part.calls.assign(std::make_move_iterator(first), std::make_move_iterator(end));
      writeTransaction(part, !last || !part.steps.empty());
    }
  }

  void writeTransaction(const PendingRows& rows, bool prune) {
    Status st = writeRows(rows);
    if (!st.ok()) {
      interned = {};        // the rolled-back transaction may have held new signatures
      trends.rewriteAll();  // and trend rows the keeper counts as written
      noteWriteFailure(rows, st);
      recordFailure(st, rows.rows());
    }
    // Pruning to the budget waits for a step boundary (or a chunk's end), in a transaction of its
    // own: what the batch committed is on disk whatever the prune meets, so a failed prune drops
    // no row; it is the writer's first error. After a failed batch it runs too: what it frees is
    // room for the next batches.
    if (prune) recordFailure(budget->stepEnded(db.get()), 0);
  }

  // The store lacks `rows` from their earliest step on: recorded beside it, said once.
  void noteWriteFailure(const PendingRows& rows, const Status& st) {
    int64_t from = newest_step;
    for (const CallEvent& c : rows.calls) from = std::min(from, c.step);
    for (const StepRow& s : rows.steps) from = std::min(from, s.step);
    const WriteFailureKind kind = writeFailureKindOf(db.get(), path, st.message());
    if (failure && failure->note(kind, from) && on_failure) on_failure(*failure->failure(), st.message());
  }

  Status writeRows(const PendingRows& batch) {
    if (batch.empty()) return Status::Ok();
    sqlite::Transaction tx(db.get());
    NANPROV_RETURN_IF_ERROR(tx.begin());
    if (batch.rank) {
      NANPROV_RETURN_IF_ERROR(sqlite::exec(db.get(), "UPDATE calls SET rank = " + std::to_string(*batch.rank)));
      rank = *batch.rank;
    }
    std::vector<TrendWarning> warnings;
    for (const CallEvent& c : batch.calls) {
      newest_step = std::max(newest_step, c.step);
      CallRecord record = c.record();
      if (rank >= 0) record.rank = rank;
      NANPROV_RETURN_IF_ERROR(insertCall(db.get(), statements, interned, record));
      budget->noteCall(record.seq, record.step,
                       storedCompactly(record) ? 0 : static_cast<int64_t>(record.tensors.size()));
      for (TrendWarning& w : trends.noteCall(record)) warnings.push_back(std::move(w));
    }
    // The rank's first non-finite values (an edge, or the sentinel's gradients): the warning said
    // before them is said again with how many steps before them it came.
    std::optional<int64_t> nonfinite;
    auto earliest = [&](int64_t step) { nonfinite = nonfinite ? std::min(*nonfinite, step) : step; };
    for (const CallEvent& c : batch.calls) {
      if (c.health != 0) earliest(c.step);
    }
    for (const SentinelRecord& f : batch.sentinel) earliest(f.step);
    std::vector<TrendWarning> said_again = nonfinite ? trends.noteNonFinite(*nonfinite) : std::vector<TrendWarning>{};
    if (!batch.calls.empty()) NANPROV_RETURN_IF_ERROR(trends.write(db.get(), warnings));
    if (!batch.calls.empty()) {
      // A running total, so readers need no scan to say how many calls were checked.
      NANPROV_RETURN_IF_ERROR(writeCounters(
          db.get(), RunCounters{.calls_written = calls_written + static_cast<int64_t>(batch.calls.size())}));
    }
    for (const KernelRecord& k : batch.kernels) NANPROV_RETURN_IF_ERROR(insertKernel(db.get(), statements, k));
    for (const CaptureRecord& c : batch.captures) NANPROV_RETURN_IF_ERROR(insertCapture(db.get(), statements, c));
    for (const SentinelRecord& f : batch.sentinel) NANPROV_RETURN_IF_ERROR(insertSentinel(db.get(), statements, f));
    for (const ModuleCheckRecord& m : batch.module_checks) {
      NANPROV_RETURN_IF_ERROR(insertModuleCheck(db.get(), statements, m));
    }
    for (const CollectiveRecord& c : batch.collectives)
      NANPROV_RETURN_IF_ERROR(insertCollective(db.get(), statements, c));
    if (!batch.replica_digests.empty()) {
      // Bounded: each step's whole-model digest, and each parameter's only where
      // store/replica_digest_rows.h keeps them.
      int64_t newest = 0;
      for (const ReplicaDigestRecord& d : withModelDigests(batch.replica_digests)) {
        NANPROV_RETURN_IF_ERROR(insertReplicaDigest(db.get(), statements, d));
        newest = std::max(newest, d.step);
      }
      NANPROV_RETURN_IF_ERROR(pruneParameterDigests(db.get(), newest));
    }
    for (const auto& [k, v] : batch.meta) NANPROV_RETURN_IF_ERROR(insertMeta(db.get(), statements, k, v));
    std::map<std::string, std::string> changed;
    if (batch.counters_said) {
      for (auto& [k, v] : metaRowsOf(batch.counters)) {
        auto it = counter_rows.find(k);
        if (it == counter_rows.end() || it->second != v) changed.emplace(k, std::move(v));
      }
    }
    for (const auto& [k, v] : changed) NANPROV_RETURN_IF_ERROR(insertMeta(db.get(), statements, k, v));
    for (const StepRow& s : batch.steps) {
      sqlite::bindRow(statements.step.get(), s.step, s.end_ns);
      NANPROV_RETURN_IF_ERROR(stepStatement(db.get(), statements.step.get()));
    }
    NANPROV_RETURN_IF_ERROR(tx.commit());
    calls_written += static_cast<int64_t>(batch.calls.size());
    for (auto& [k, v] : changed) counter_rows[k] = std::move(v);
    if (on_warning) {
      for (const TrendWarning& w : warnings) on_warning(w);
      for (const TrendWarning& w : said_again) on_warning(w);
    }
    return Status::Ok();
  }

  // Rows that come a few a run (the first non-finite step's): queued for the next batch, no wake-up.
  template <typename Row>
  void appendFew(std::vector<Row> PendingRows::* table, std::vector<Row> rows) {
    std::lock_guard<std::mutex> lock(mu);
    if (state != State::kActive) {
      dropped += static_cast<int64_t>(rows.size());
      return;
    }
    for (Row& r : rows) (pending.*table).push_back(std::move(r));
  }

  void takeQueued(PendingRows* batch) {
    CallEvent event;
    while (queued.pop(&event)) batch->calls.push_back(event);
  }

  void recordFailure(const Status& st, size_t rows) {
    if (st.ok()) return;
    dropped += static_cast<int64_t>(rows);
    std::lock_guard<std::mutex> lock(mu);
    if (first_error.ok()) first_error = st;
  }

  void run() {
    std::unique_lock<std::mutex> lock(mu);
    while (state == State::kActive) {
      wake.wait_for(lock, kIdleFlushPeriod, [&] {
        return flush_requested || state != State::kActive || queued.size() >= queued.capacity() / 2;
      });
      if (state != State::kActive) break;
      flush_requested = false;
      PendingRows batch;
      std::swap(batch, pending);
      takeQueued(&batch);
      lock.unlock();
      writeBatch(batch);
      lock.lock();
    }
  }
};

StoreWriter::StoreWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

namespace {

// Writes the schema and meta into `staging`, and closes it: the WAL folded into the file.
Status fillStaging(const std::string& staging, const std::map<std::string, std::string>& meta,
                   const RunCounters& counters) {
  {
    NANPROV_ASSIGN_OR_RETURN(sqlite::Db db, sqlite::open(staging, sqlite::Mode::kReadWriteCreate));
    sqlite3* raw = db.get();
    // WAL + NORMAL: a committed transaction survives the process dying (not a power cut), and
    // commits do not fsync on the training's time. WAL mode is stored in the file.
    NANPROV_RETURN_IF_ERROR(sqlite::exec(raw, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"));
    NANPROV_RETURN_IF_ERROR(sqlite::exec(raw, kSchemaSql));
    NANPROV_ASSIGN_OR_RETURN(Statements statements, prepareStatements(raw));
    std::map<std::string, std::string> all = meta;
    all["schema_version"] = std::to_string(kSchemaVersion);
    for (const auto& [k, v] : all) NANPROV_RETURN_IF_ERROR(insertMeta(raw, statements, k, v));
    NANPROV_RETURN_IF_ERROR(writeCounters(raw, counters));
  }
  // A WAL left behind holds the schema (the fold failed on a full disk): the file alone, linked
  // into place, would be read as damaged.
  std::error_code ec;
  if (std::filesystem::file_size(staging + "-wal", ec) > 0 && !ec) {
    return Status::Error(staging + ": the store's schema could not be written into it (is the disk full?)");
  }
  return Status::Ok();
}

// Writes the schema and meta into a staging file next to `path`, then links it into place. A
// reader therefore sees either no store or one with its schema and schema_version, never one
// being created (that read as "damaged"). link() refuses an existing name, so a second process
// claiming the same rank store fails instead of merging its rows into another run's. The staging
// file goes whatever happens: a store that could not be made leaves nothing behind.
Status createStore(const std::string& path, const std::map<std::string, std::string>& meta,
                   const RunCounters& counters) {
  std::filesystem::path final_path(path);
  std::string staging =
      (final_path.parent_path() / ("." + final_path.filename().string() + "." + std::to_string(getpid()) + ".creating"))
          .string();
  auto removeStaging = [&] {
    std::error_code ignored;
    for (const char* suffix : {"", "-wal", "-shm", "-journal"}) std::filesystem::remove(staging + suffix, ignored);
  };
  removeStaging();
  Status filled = fillStaging(staging, meta, counters);
  int linked = filled.ok() ? link(staging.c_str(), path.c_str()) : -1;
  int link_errno = errno;
  removeStaging();
  if (!filled.ok()) return filled;
  if (linked != 0) {
    return Status::Error(link_errno == EEXIST ? path + " already exists: another process of this run holds this rank"
                                              : path + ": " + std::strerror(link_errno));
  }
  return Status::Ok();
}

}  // namespace

StatusOr<std::unique_ptr<StoreWriter>> StoreWriter::open(const std::string& path,
                                                         const std::map<std::string, std::string>& meta,
                                                         int64_t budget_bytes, TrendSink on_warning,
                                                         const RunCounters& counters, WriteFailureSink on_failure) {
  RunCounters all = counters;
  if (budget_bytes > 0) all.store_budget = budget_bytes;
  NANPROV_RETURN_IF_ERROR(createStore(path, meta, all));
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  NANPROV_ASSIGN_OR_RETURN(impl->db, sqlite::open(path, sqlite::Mode::kReadWrite));
  sqlite3* raw = impl->db.get();
  NANPROV_RETURN_IF_ERROR(sqlite::exec(raw, "PRAGMA synchronous=NORMAL;"));  // per connection
  impl->budget = std::make_unique<BudgetKeeper>(path, budget_bytes);
  NANPROV_RETURN_IF_ERROR(impl->budget->configure(raw));
  impl->on_warning = std::move(on_warning);
  impl->on_failure = std::move(on_failure);
  NANPROV_ASSIGN_OR_RETURN(impl->failure, WriteFailureRecord::create(path));
  NANPROV_ASSIGN_OR_RETURN(impl->statements, prepareStatements(raw));

  Impl* p = impl.get();
  impl->thread = std::make_unique<std::thread>([p] { p->run(); });
  return std::unique_ptr<StoreWriter>(new StoreWriter(std::move(impl)));
}

// A writer its owner never closed: what failed was already said through on_failure as it happened.
StoreWriter::~StoreWriter() { close().ignore(); }

void StoreWriter::append(const CallEvent& call) {
  if (!impl_->accepting.load(std::memory_order_acquire)) {
    ++impl_->dropped;
    return;
  }
  BoundedQueue<CallEvent>& queued = impl_->queued;
  if (queued.push(call)) {
    // Without the lock: a wake-up the writer misses is made up at its next period or flush.
    if (queued.size() >= queued.capacity() / 2) impl_->wake.notify_one();
    return;
  }
  std::lock_guard<std::mutex> lock(impl_->mu);  // the queue is full: the writer is behind
  if (impl_->state != Impl::State::kActive || impl_->pending.calls.size() >= kMaxPendingCalls) {
    ++impl_->dropped;
    return;
  }
  impl_->pending.calls.push_back(call);
}

void StoreWriter::append(const CallRecord& record) { append(CallEvent::of(record)); }

void StoreWriter::appendKernels(std::vector<KernelRecord> kernels) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto& pending = impl_->pending.kernels;
  if (impl_->state != Impl::State::kActive || pending.size() + kernels.size() > kMaxPendingKernels) {
    impl_->dropped += static_cast<int64_t>(kernels.size());
    return;
  }
  pending.insert(pending.end(), std::make_move_iterator(kernels.begin()), std::make_move_iterator(kernels.end()));
}

void StoreWriter::appendSentinel(std::vector<SentinelRecord> findings) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->state != Impl::State::kActive) {
      impl_->dropped += static_cast<int64_t>(findings.size());
      return;
    }
    for (SentinelRecord& f : findings) impl_->pending.sentinel.push_back(std::move(f));
    impl_->flush_requested = true;  // once per run at most
  }
  impl_->wake.notify_one();
}

void StoreWriter::appendModuleChecks(std::vector<ModuleCheckRecord> checks) {
  impl_->appendFew(&PendingRows::module_checks, std::move(checks));
}

void StoreWriter::appendCollectives(std::vector<CollectiveRecord> collectives) {
  impl_->appendFew(&PendingRows::collectives, std::move(collectives));
}

void StoreWriter::appendReplicaDigests(std::vector<ReplicaDigestRecord> digests) {
  impl_->appendFew(&PendingRows::replica_digests, std::move(digests));
}

void StoreWriter::appendCapture(CaptureRecord capture) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->state != Impl::State::kActive) {
      ++impl_->dropped;
      return;
    }
    impl_->pending.captures.push_back(std::move(capture));
    impl_->flush_requested = true;  // rare, and a user waits for it
  }
  impl_->wake.notify_one();
}

void StoreWriter::setRank(int rank) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->state == Impl::State::kActive) impl_->pending.rank = rank;
}

void StoreWriter::setMeta(const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->state == Impl::State::kActive) impl_->pending.meta[key] = value;
}

void StoreWriter::setCounters(const RunCounters& counters) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->state != Impl::State::kActive) return;
  impl_->pending.counters.update(counters);
  impl_->pending.counters_said = true;
}

void StoreWriter::stepEnded(int64_t step, int64_t end_ns) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->state != Impl::State::kActive) return;
    impl_->pending.steps.push_back({step, end_ns});
    impl_->flush_requested = true;
  }
  impl_->wake.notify_one();
}

void StoreWriter::requestFlush() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->flush_requested = true;
  }
  impl_->wake.notify_one();
}

Status StoreWriter::close() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->state == Impl::State::kClosed) return impl_->first_error;
    impl_->state = Impl::State::kClosed;
    impl_->accepting.store(false, std::memory_order_release);
  }
  impl_->wake.notify_one();
  if (impl_->thread && impl_->thread->joinable()) impl_->thread->join();
  impl_->takeQueued(&impl_->pending);
  // The thread is gone: this is the single place that writes the final batch.
  impl_->writeBatch(impl_->pending);
  impl_->pending = {};
  sqlite3* raw = impl_->db.get();
  (void)writeCounters(raw, RunCounters{.dropped_rows = impl_->dropped.load()});
  // Fold the WAL back so a finished run is one plain file. On a full disk that fails and the WAL
  // keeps the committed rows: the store stays in WAL mode, readable with it.
  sqlite::exec(raw, "PRAGMA wal_checkpoint(TRUNCATE); PRAGMA journal_mode=DELETE;").ignore();
  impl_->statements = {};
  impl_->db.reset();
  if (impl_->failure) impl_->failure->discardIfClean();
  return impl_->first_error;
}

int64_t StoreWriter::droppedRows() const { return impl_->dropped.load(); }

std::optional<WriteFailure> StoreWriter::writeFailure() const {
  return impl_->failure ? impl_->failure->failure() : std::nullopt;
}

size_t StoreWriter::pendingCalls() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->pending.calls.size() + impl_->queued.size();
}

}  // namespace nanprov::store
