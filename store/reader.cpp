#include "store/reader.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <filesystem>
#include <map>
#include <set>
#include <tuple>

#include "base/text.h"
#include "store/call_cursor.h"
#include "store/derived_tables.h"
#include "store/mapped_counters.h"
#include "store/meta_values.h"
#include "store/rank_store.h"
#include "store/run_dir.h"
#include "store/sqlite_rows.h"
#include "store/trend_rows.h"

namespace nanprov::store {
namespace {

// Every call of one store that passes `filter`, appended to *out in seq order.
Status loadCalls(sqlite3* db, const std::string& path, const CallFilter& filter, std::vector<CallRecord>* out) {
  NANPROV_ASSIGN_OR_RETURN(auto cursor, CallCursor::open(db, path, filter));
  CallRecord call;
  while (true) {
    NANPROV_ASSIGN_OR_RETURN(auto more, cursor.next(&call));
    if (!more) return Status::Ok();
    out->push_back(std::move(call));
  }
}

// One integer from a query with bound integer parameters, or nullopt when it gives no row.
StatusOr<std::optional<int64_t>> queryInteger(sqlite3* db, const std::string& sql,
                                              std::initializer_list<int64_t> args) {
  NANPROV_ASSIGN_OR_RETURN(auto st, sqlite::prepare(db, sql));
  int i = 1;
  for (int64_t a : args) sqlite3_bind_int64(st.get(), i++, a);
  int rc = sqlite3_step(st.get());
  if (rc == SQLITE_ROW && sqlite3_column_type(st.get(), 0) != SQLITE_NULL) {
    return std::optional<int64_t>(sqlite3_column_int64(st.get(), 0));
  }
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) return Status::Error(sqlite::errorOf(db));
  return std::optional<int64_t>();
}

// The forward call before `seq` in its step on this rank, not a recompute: walked back by seq,
// which grows with time on a rank, until the step changes.
StatusOr<std::optional<int64_t>> previousForward(sqlite3* db, int64_t seq, int64_t step) {
  NANPROV_ASSIGN_OR_RETURN(
      auto st, sqlite::prepare(db, "SELECT seq, step, phase, recompute FROM calls WHERE seq < ? ORDER BY seq DESC"));
  sqlite3_bind_int64(st.get(), 1, seq);
  while (sqlite3_step(st.get()) == SQLITE_ROW) {
    if (sqlite3_column_int64(st.get(), 1) != step) break;
    if (columnText(st.get(), 2) == "fwd" && sqlite3_column_int(st.get(), 3) == 0) {
      return std::optional<int64_t>(sqlite3_column_int64(st.get(), 0));
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
    NANPROV_ASSIGN_OR_RETURN(std::optional<int64_t> seq, orNotAStore(path, std::move(found)));
    if (seq) seqs.push_back(*seq);
    return Status::Ok();
  };
  const std::string by_time = " ORDER BY step, start_ns, seq LIMIT 1";
  NANPROV_RETURN_IF_ERROR(add(queryInteger(db, "SELECT seq FROM calls WHERE health != 0" + by_time, {})));
  NANPROV_RETURN_IF_ERROR(
      add(queryInteger(db, "SELECT seq FROM calls WHERE health != 0 AND health = 1" + by_time, {})));
  std::vector<int64_t> edges = seqs;
  for (int64_t seq : edges) {
    auto step = queryInteger(db, "SELECT step FROM calls WHERE seq = ?", {seq});
    if (!step.ok() || !*step) return notAStore(path, "a call vanished while it was read");
    NANPROV_RETURN_IF_ERROR(add(previousForward(db, seq, **step)));
    // Only the traced calls (the kernels table's) are candidates: a few steps' worth, looked up by seq.
    NANPROV_ASSIGN_OR_RETURN(
        std::optional<int64_t> untraced_cuda,
        orNotAStore(
            path,
            queryInteger(
                db,
                "SELECT c.seq FROM calls c JOIN signatures s ON s.id = c.sig WHERE c.seq = ? AND s.device != 'cpu' "
                "AND NOT EXISTS (SELECT 1 FROM kernels WHERE kernels.seq = c.seq)",
                {seq})));
    if (!untraced_cuda) continue;
    NANPROV_RETURN_IF_ERROR(add(queryInteger(
        db,
        "SELECT d.seq FROM calls d, calls c WHERE c.seq = ? AND d.seq IN (SELECT DISTINCT seq FROM kernels) "
        "AND d.sig = c.sig AND d.layer = c.layer AND d.phase = c.phase ORDER BY d.seq DESC LIMIT 1",
        {seq})));
  }
  std::sort(seqs.begin(), seqs.end());
  seqs.erase(std::unique(seqs.begin(), seqs.end()), seqs.end());
  if (!seqs.empty()) NANPROV_RETURN_IF_ERROR(loadCalls(db, path, CallFilter::of(seqs), &run->calls));
  *loaded = seqs;
  NANPROV_ASSIGN_OR_RETURN(std::optional<int64_t> count,
                           orNotAStore(path, queryInteger(db, "SELECT COUNT(*) FROM calls WHERE health != 0", {})));
  run->not_clean.calls += *count;
  NANPROV_ASSIGN_OR_RETURN(
      sqlite::Stmt layers,
      orNotAStore(path, sqlite::prepare(db, "SELECT DISTINCT layer FROM calls WHERE health != 0")));
  while (sqlite3_step(layers.get()) == SQLITE_ROW) run->not_clean.layers.insert(sqlite3_column_int64(layers.get(), 0));
  return Status::Ok();
}

// The kernels of one store, or of the calls `seqs` only.
Status loadKernels(sqlite3* db, const std::string& path, int rank, const std::vector<int64_t>* seqs,
                   std::vector<KernelRecord>* out) {
  if (seqs && seqs->empty()) return Status::Ok();
  const std::string kernels =
      "SELECT seq,correlation_id,name,grid_x,grid_y,grid_z,block_x,block_y,block_z,start_ns,end_ns,"
      "device,stream FROM kernels" +
      (seqs ? " WHERE seq IN (" + seqList(*seqs) + ")" : std::string()) + " ORDER BY seq, start_ns, rowid";
  return sqlite::eachRowOf(db, path, kernels, [&](sqlite3_stmt* s) {
    KernelRecord& k = out->emplace_back();
    k.rank = rank;
    sqlite::readRow(s, 0, k.seq, k.correlation_id, k.name, k.grid[0], k.grid[1], k.grid[2], k.block[0], k.block[1],
                    k.block[2], k.start_ns, k.end_ns, k.device, k.stream);
    return Status::Ok();
  });
}

Status loadCaptures(sqlite3* db, const std::string& path, int rank, std::vector<CaptureRecord>* out) {
  // With the captured call's step, layer and phase, for the audit's coverage (calls.seq is the key).
  const char* captures =
      "SELECT c.seq,c.trigger,c.path,c.bytes,c.skipped,k.step,k.layer,k.phase FROM captures c "
      "LEFT JOIN calls k ON k.seq = c.seq ORDER BY c.rowid";
  return sqlite::eachRowOf(db, path, captures, [&](sqlite3_stmt* s) {
    CaptureRecord& c = out->emplace_back();
    c.rank = rank;
    std::string trigger;
    sqlite::readRow(s, 0, c.seq, trigger, c.path, c.bytes, c.skipped);
    if (auto named = captureTriggerNamed(trigger)) c.trigger = *named;
    else
      return notAStore(
          path, "capture of call " + std::to_string(c.seq) + " has an unknown trigger '" + printable(trigger) + "'");
    if (sqlite3_column_type(s, 5) != SQLITE_NULL) {
      std::string phase;
      sqlite::readRow(s, 5, c.step, c.layer, phase);
      parsePhase(phase, &c.phase);  // as the calls reader reads it (store/call_cursor.cpp)
    }
    return Status::Ok();
  });
}

Status loadSentinel(sqlite3* db, const std::string& path, int rank, std::vector<SentinelRecord>* out) {
  const char* rows = "SELECT step,tensor,parameter,IFNULL(norm,'nan') FROM sentinel ORDER BY rowid";
  return sqlite::eachRowOf(db, path, rows, [&](sqlite3_stmt* s) {
    SentinelRecord& f = out->emplace_back();
    f.rank = rank;
    std::string tensor;
    sqlite::readRow(s, 0, f.step, tensor, f.parameter);
    if (auto named = sentinelTensorNamed(tensor)) f.tensor = *named;
    else
      return notAStore(path, "the gradient sentinel's finding at step " + std::to_string(f.step) +
                                 " has an unknown tensor '" + printable(tensor) + "'");
    f.norm = sqlite3_column_type(s, 3) == SQLITE_TEXT ? std::nan("") : sqlite3_column_double(s, 3);
    return Status::Ok();
  });
}

// A store written without --trail, or before the table existed, has no rows to read.
Status loadModuleChecks(sqlite3* db, const std::string& path, int rank, std::vector<ModuleCheckRecord>* out) {
  if (!sqlite::hasTable(db, "module_checks")) return Status::Ok();
  // Stores written before compiled modules were checked have no `unchecked` column.
  const bool has_unchecked = sqlite::hasColumn(db, "module_checks", "unchecked");
  // Stores written before the trail told a module handed no tensor from one with finite inputs
  // have no `inputs` column: their inputs_finite is all they say.
  const bool has_inputs = sqlite::hasColumn(db, "module_checks", "inputs");
  const std::string rows =
      std::string(
          "SELECT step,phase,module,class,inputs_finite,nan,posinf,neginf,largest_input,ord,time_ns,gradient,") +
      (has_unchecked ? "unchecked" : "''") + "," + (has_inputs ? "inputs" : "''") + " FROM module_checks ORDER BY ord";
  return sqlite::eachRowOf(db, path, rows, [&](sqlite3_stmt* s) {
    ModuleCheckRecord& m = out->emplace_back();
    m.rank = rank;
    std::string phase, unchecked, inputs;
    bool inputs_finite = true;
    sqlite::readRow(s, 0, m.step, phase, m.module, m.module_class, inputs_finite, m.nan, m.posinf, m.neginf,
                    m.largest_input, m.order, m.time_ns, m.gradient, unchecked, inputs);
    m.unchecked_before = splitList(unchecked, '\n');
    m.inputs = inputs_finite ? ModuleInputs::kFinite : ModuleInputs::kNonFinite;
    if (!inputs.empty() && !parseModuleInputs(inputs, &m.inputs)) {
      return notAStore(path, "a module check has unknown inputs '" + printable(inputs) + "'");
    }
    if (!parsePhase(phase, &m.phase))
      return notAStore(path, "a module check has an unknown phase '" + printable(phase) + "'");
    return Status::Ok();
  });
}

// Stores written before replica digests, or by a rank whose parameters nothing replicates, hold none.
Status loadReplicaDigests(sqlite3* db, const std::string& path, int rank, std::vector<ReplicaDigestRecord>* out) {
  if (!sqlite::hasTable(db, "replica_digests")) return Status::Ok();
  const char* rows = "SELECT step,parameter,digest FROM replica_digests ORDER BY rowid";
  return sqlite::eachRowOf(db, path, rows, [&](sqlite3_stmt* s) {
    ReplicaDigestRecord& d = out->emplace_back();
    d.rank = rank;
    sqlite::readRow(s, 0, d.step, d.parameter, d.digest);
    return Status::Ok();
  });
}

// Stores written before collectives were checked have no such table: nothing to read.
Status loadCollectives(sqlite3* db, const std::string& path, int rank, std::vector<CollectiveRecord>* out) {
  if (!sqlite::hasTable(db, "collectives")) return Status::Ok();
  const char* rows =
      "SELECT step,ord,op,grp,group_size,tensors,in_checked,in_numel,in_nan,in_posinf,in_neginf,in_max_abs,"
      "out_checked,out_numel,out_nan,out_posinf,out_neginf,out_max_abs,time_ns FROM collectives ORDER BY rowid";
  return sqlite::eachRowOf(db, path, rows, [&](sqlite3_stmt* s) {
    CollectiveRecord& c = out->emplace_back();
    c.rank = rank;
    CollectiveSide& i = c.input;
    CollectiveSide& o = c.output;
    sqlite::readRow(s, 0, c.step, c.ord, c.op, c.group, c.group_size, c.tensors, i.checked, i.numel, i.nan, i.posinf,
                    i.neginf, i.max_abs, o.checked, o.numel, o.nan, o.posinf, o.neginf, o.max_abs, c.time_ns);
    return Status::Ok();
  });
}

// The rows a table of a store holds, counted (0 when it cannot be read). The call rows are what
// the report counts, whatever the writer's calls_written says.
int64_t countRows(sqlite3* db, const char* table) {
  auto st = sqlite::prepare(db, std::string("SELECT COUNT(*) FROM ") + table);
  if (!st.ok() || sqlite3_step(st->get()) != SQLITE_ROW) return 0;
  return sqlite3_column_int64(st->get(), 0);
}

// A store whose writes failed: its steps are at least those its calls and summaries reached (a
// call at step s ran after s steps ended), though the rows of the batches lost are gone.
Status countStepsReached(sqlite3* db, const std::string& path, RankInfo* info) {
  NANPROV_ASSIGN_OR_RETURN(
      std::optional<int64_t> reached,
      orNotAStore(path, queryInteger(db,
                                     "SELECT MAX(s) FROM (SELECT MAX(step) AS s FROM calls UNION ALL "
                                     "SELECT MAX(last_step) + 1 FROM step_summaries)",
                                     {})));
  if (reached) info->steps = std::max(info->steps, *reached);
  return Status::Ok();
}

// What the store budget summarised (a store written before it has no step_summaries): from the
// writer's running total in meta (a SUM over a thousand ranks' summaries would be the report's
// slowest part), and the first and last rows by key.
Status loadSummarised(sqlite3* db, const std::string& path, RankInfo* info) {
  if (!sqlite::hasTable(db, "step_summaries")) return Status::Ok();
  if (!info->counters_unreadable.empty()) return notAStore(path, info->counters_unreadable);
  if (!info->counters.summarised) return Status::Ok();
  const char* ends =
      "SELECT (SELECT step FROM step_summaries ORDER BY step LIMIT 1), "
      "(SELECT last_step FROM step_summaries ORDER BY step DESC LIMIT 1)";
  return sqlite::eachRowOf(db, path, ends, [&](sqlite3_stmt* s) {
    sqlite::readRow(s, 0, info->summarised_first_step, info->summarised_last_step);
    return Status::Ok();
  });
}

// The calls that were not clean and were summarised (a run that stayed non-finite past its first
// edge steps) still count in how far the values spread: their number, ranks and layers.
Status countSummarisedNotClean(sqlite3* db, const std::string& path, const RankInfo& info, RunData* run) {
  const int64_t not_clean = info.summaries().not_clean;
  if (not_clean == 0) return Status::Ok();
  run->not_clean.calls += not_clean;
  run->not_clean.ranks.insert(info.rank);
  const char* layers = "SELECT DISTINCT layer FROM step_summaries WHERE not_clean > 0";
  return sqlite::eachRowOf(db, path, layers, [&](sqlite3_stmt* s) {
    run->not_clean.layers.insert(sqlite3_column_int64(s, 0));
    return Status::Ok();
  });
}

// The store's summary rows over steps first..last, joined where one follows another. A store's
// summaries are bounded by its budget, so the stretches are too.
Status loadSummarisedStretches(sqlite3* db, const std::string& path, int64_t first, int64_t last,
                               std::vector<SummarisedStretch>* out) {
  if (!sqlite::hasTable(db, "step_summaries")) return Status::Ok();
  NANPROV_ASSIGN_OR_RETURN(
      sqlite::Stmt rows,
      orNotAStore(path, sqlite::prepare(db,
                                        "SELECT step, last_step, SUM(calls), SUM(not_clean) FROM step_summaries "
                                        "WHERE last_step >= ? AND step <= ? GROUP BY step, last_step ORDER BY step")));
  sqlite::bindRow(rows.get(), first, last);
  return sqlite::eachRow(db, rows.get(), path, [&](sqlite3_stmt* s) {
    SummarisedStretch row;
    sqlite::readRow(s, 0, row.first_step, row.last_step, row.calls, row.not_clean);
    if (!out->empty() && row.first_step <= out->back().last_step + 1) {
      SummarisedStretch& joined = out->back();
      joined.last_step = std::max(joined.last_step, row.last_step);
      joined.calls += row.calls, joined.not_clean += row.not_clean;
    } else {
      out->push_back(row);
    }
    return Status::Ok();
  });
}

Status loadStepEnds(sqlite3* db, const std::string& path, std::map<int64_t, int64_t>* out) {
  return sqlite::eachRowOf(db, path, "SELECT step, end_ns FROM steps", [&](sqlite3_stmt* s) {
    int64_t step = 0, end_ns = 0;
    sqlite::readRow(s, 0, step, end_ns);
    (*out)[step] = end_ns;
    return Status::Ok();
  });
}

// More calls than any process can hold begun and unstored: the writer's pending calls (2^18) and
// queue, and the checks in flight, with room to spare. A tally past this, and past the rows the
// writer dropped, is damage, not a death.
constexpr int64_t kMostCallsUnstored = int64_t{1} << 22;

// A rank's call tally (store/mapped_counters.h): how many calls began, and the earliest step at
// which the process saw a non-finite value (none in tallies of one slot, older runs').
struct CallTally {
  int64_t begun = 0;
  std::optional<int64_t> nonfinite_step;
};

// The tally checked against the `stored` calls of its store and the rows its writer `dropped`:
// nullopt when there is none, or when it contradicts the store (then `damage` says so once).
std::optional<CallTally> tallyOf(const std::string& path, int rank, int64_t stored, int64_t dropped,
                                 std::vector<std::string>* damage) {
  auto counts = readMappedCounters(path, kCallTallySlots);
  if (!counts) counts = readMappedCounters(path, 1);
  if (!counts) return std::nullopt;
  CallTally tally{.begun = (*counts)[kCallsBegun]};
  // Bounded as a step can be: a damaged slot never names a step past any run's.
  if (counts->size() > kFirstNonFiniteStep && (*counts)[kFirstNonFiniteStep] > 0 &&
      (*counts)[kFirstNonFiniteStep] <= int64_t{1} << 40) {
    tally.nonfinite_step = (*counts)[kFirstNonFiniteStep] - 1;
  }
  const int64_t begun = tally.begun;
  const std::string said =
      "rank " + std::to_string(rank) + "'s call tally says " + std::to_string(begun) + " calls began, ";
  if (begun < stored) {
    damage->push_back(said + "fewer than the " + std::to_string(stored) +
                      " its store holds: the tally is damaged and not counted");
    return std::nullopt;
  }
  if (begun - stored > kMostCallsUnstored + dropped) {
    damage->push_back(said + "more unstored than any process holds: the tally is damaged and not counted");
    return std::nullopt;
  }
  return tally;
}

}  // namespace

const CaptureRecord* RunData::captureOf(int rank, int64_t seq) const {
  const CaptureRecord* found = nullptr;
  for (const CaptureRecord& c : captures) {
    if (c.rank == rank && c.seq == seq && (!found || (found->path.empty() && !c.path.empty()))) found = &c;
  }
  return found;
}

std::string RunData::capturePath(const CaptureRecord& capture) const {
  return (std::filesystem::path(dirOf(capture.rank)) / capture.path).string();
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
    for (const auto& [what, n] : r.counters.unprobed) out[what] += n;
  }
  for (const auto& [rank, n] : worker_calls) out[kWorkerAttention] += n;
  return out;
}

std::map<std::string, int64_t> RunData::unprobedFirstSteps() const {
  std::map<std::string, int64_t> seen;  // the earliest over ranks
  for (const RankInfo& r : ranks) {
    for (const auto& [what, step] : r.counters.unprobed_first_step) {
      auto [slot, fresh] = seen.emplace(what, step);
      if (!fresh) slot->second = std::min(slot->second, step);
    }
  }
  std::map<std::string, int64_t> out;
  for (const auto& [what, n] : unprobed()) out[what] = seen.count(what) ? seen[what] : 0;
  return out;
}

std::optional<std::pair<int64_t, int>> RunData::earliestNonFiniteTallied() const {
  std::optional<std::pair<int64_t, int>> earliest;
  auto consider = [&](int rank, int64_t step) {
    if (!earliest || std::make_pair(step, rank) < *earliest) earliest = std::make_pair(step, rank);
  };
  for (const RankInfo& r : ranks) {
    if (r.nonfinite_step_seen) consider(r.rank, *r.nonfinite_step_seen);
  }
  for (const auto& [rank, step] : nonfinite_without_store) consider(rank, step);
  return earliest;
}

int64_t RunData::callsNotStored() const {
  int64_t lost = calls_begun_without_store;
  for (const RankInfo& r : ranks) {
    const int64_t kept = r.calls_stored + r.summaries().calls;
    if (r.calls_begun && *r.calls_begun > kept) lost += *r.calls_begun - kept;
  }
  return lost;
}

std::vector<std::string> RunData::incompleteStores() const {
  std::vector<std::string> out;
  for (const RankInfo& r : ranks) {
    if (r.write_failure) out.push_back("rank " + std::to_string(r.rank) + ": " + writeFailureText(*r.write_failure));
  }
  return out;
}

Summarised RunData::summarised() const {
  Summarised out;
  for (const RankInfo& r : ranks) {
    const BudgetSummaries s = r.summaries();
    if (s.calls == 0) continue;
    out.calls += s.calls;
    out.not_clean += s.not_clean;
    out.first_step = out.ranks ? std::min(out.first_step, r.summarised_first_step) : r.summarised_first_step;
    out.last_step = std::max(out.last_step, r.summarised_last_step);
    out.every = std::max(out.every, s.every);
    ++out.ranks;
  }
  return out;
}

int RunData::worldSize() const {
  int64_t size = 0;
  for (const RankInfo& r : ranks) {
    if (auto n = metaInteger(r.meta, "world_size", 1, kMaxRank + 1)) size = std::max(size, *n);
  }
  return static_cast<int>(size);
}

std::vector<int> RunData::missingRanks() const {
  std::set<int> present, missing;
  for (const RankInfo& r : ranks) present.insert(r.rank);
  for (int r = 0; r < worldSize(); ++r) {
    if (!present.count(r)) missing.insert(r);
  }
  for (const auto& [rank, why] : unrecorded) {
    if (!present.count(rank)) missing.insert(rank);
  }
  return {missing.begin(), missing.end()};
}

bool RunData::acrossHosts() const {
  std::set<std::string> hosts;
  for (const RankInfo& r : ranks) {
    if (const std::string* host = metaText(r.meta, "host")) hosts.insert(*host);
  }
  return hosts.size() > 1 || dirs.size() > 1;
}

std::string RunData::dirOf(int rank) const {
  for (const RankInfo& r : ranks) {
    if (r.rank == rank) return std::filesystem::path(r.path).parent_path().string();
  }
  return dir;
}

bool RunData::trailOn() const {
  return std::any_of(ranks.begin(), ranks.end(), [](const RankInfo& r) { return r.counters.trail; });
}

StepUnit RunData::stepUnit() const {
  for (const RankInfo& r : ranks) {
    if (r.counters.step_unit == StepUnit::kForwardPass) return StepUnit::kForwardPass;
  }
  return StepUnit::kOptimizerStep;
}

// The DataLoader workers' attention calls, per rank, from their counters (store/run_dir.h).
static void countWorkerCalls(const std::vector<std::string>& dirs, RunData* run) {
  for (const std::string& dir : dirs) {
    for (const auto& [rank, path] : workerCallPaths(dir)) {
      auto counts = readMappedCounters(path);
      // Bounded, so that no sum over ranks overflows whatever a damaged counter holds.
      if (counts && (*counts)[0] > 0) run->worker_calls[rank] += std::min((*counts)[0], int64_t{1} << 40);
    }
  }
}

// Tallies of ranks that have no store here: they died before their first batch.
static void countTalliesWithoutStore(const std::vector<std::string>& dirs, RunData* run) {
  std::set<int> stored;
  for (const RankInfo& r : run->ranks) stored.insert(r.rank);
  for (const std::string& dir : dirs) {
    for (const auto& [rank, tally] : callTallyPaths(dir)) {
      if (stored.count(rank)) continue;
      // A rank that trained unrecorded may have begun any number of calls: no bound applies.
      const int64_t unbounded = run->unrecorded.count(rank) ? int64_t{1} << 62 : 0;
      const std::optional<CallTally> counted = tallyOf(processFileBehind(tally), rank, 0, unbounded, &run->damage);
      if (!counted) continue;
      // An unrecorded rank's calls are said with its reason (store/run_dir.h), not as a death; what
      // its tally saw go non-finite is said all the same.
      if (!run->unrecorded.count(rank)) run->calls_begun_without_store += counted->begun;
      if (counted->nonfinite_step) run->nonfinite_without_store[rank] = *counted->nonfinite_step;
    }
  }
}

// Orders calls across ranks: by step, then time, then rank and seq.
static bool byStepAndTime(const CallRecord& a, const CallRecord& b) {
  return std::tie(a.step, a.start_ns, a.rank, a.seq) < std::tie(b.step, b.start_ns, b.rank, b.seq);
}

KernelRecord cpuKernelOf(const CallRecord& call) {
  return KernelRecord{
      .rank = call.rank, .seq = call.seq, .name = call.op, .start_ns = call.start_ns, .end_ns = call.end_ns};
}

StatusOr<RunData> loadRun(const RunDirs& dirs, RunScope scope) {
  RunData run;
  run.dirs = dirs.all;
  run.dir = dirs.all.front();
  run.scope = scope;
  run.settings = readRunFile(run.dir);
  for (const std::string& dir : dirs.all) run.unrecorded.merge(unrecordedRanks(dir));
  NANPROV_ASSIGN_OR_RETURN(const std::vector<std::string> paths, rankStorePaths(dirs));
  countWorkerCalls(dirs.all, &run);
  if (paths.empty() && areRunDirs(dirs)) {
    countTalliesWithoutStore(dirs.all, &run);
    return run;
  }
  if (paths.empty()) return storesOf(dirs).status();
  for (const std::string& path : paths) {
    RankInfo info;
    NANPROV_ASSIGN_OR_RETURN(auto db, openRankStore(path, &info));
    if (scope == RunScope::kEdges) {
      std::vector<int64_t> loaded;
      int64_t not_clean_before = run.not_clean.calls;
      NANPROV_RETURN_IF_ERROR(loadEdges(db.get(), path, &run, &loaded));
      if (run.not_clean.calls > not_clean_before) run.not_clean.ranks.insert(info.rank);
      NANPROV_RETURN_IF_ERROR(loadKernels(db.get(), path, info.rank, &loaded, &run.kernels));
    } else if (scope == RunScope::kTraced) {
      size_t first = run.kernels.size();
      NANPROV_RETURN_IF_ERROR(loadKernels(db.get(), path, info.rank, nullptr, &run.kernels));
      std::vector<int64_t> traced;
      for (size_t i = first; i < run.kernels.size(); ++i) {
        if (traced.empty() || traced.back() != run.kernels[i].seq) traced.push_back(run.kernels[i].seq);
      }
      if (!traced.empty()) NANPROV_RETURN_IF_ERROR(loadCalls(db.get(), path, CallFilter::of(traced), &run.calls));
    } else {
      NANPROV_RETURN_IF_ERROR(loadCalls(db.get(), path, CallFilter::all(), &run.calls));
      NANPROV_RETURN_IF_ERROR(loadKernels(db.get(), path, info.rank, nullptr, &run.kernels));
      NANPROV_RETURN_IF_ERROR(loadStepEnds(db.get(), path, &info.step_ends_ns));
    }
    NANPROV_RETURN_IF_ERROR(loadCaptures(db.get(), path, info.rank, &run.captures));
    NANPROV_RETURN_IF_ERROR(loadSentinel(db.get(), path, info.rank, &run.sentinel));
    NANPROV_RETURN_IF_ERROR(loadModuleChecks(db.get(), path, info.rank, &run.module_checks));
    NANPROV_RETURN_IF_ERROR(loadCollectives(db.get(), path, info.rank, &run.collectives));
    NANPROV_RETURN_IF_ERROR(loadReplicaDigests(db.get(), path, info.rank, &run.replica_digests));
    info.calls_stored = countRows(db.get(), "calls");
    NANPROV_RETURN_IF_ERROR(loadSummarised(db.get(), path, &info));
    // The steps table's rows, and those the summaries' thinning took. A store whose writes failed
    // lacks the rows of the batches lost: the steps its calls ran in happened all the same.
    info.steps = countRows(db.get(), "steps") + info.summaries().steps_thinned;
    if (info.write_failure) NANPROV_RETURN_IF_ERROR(countStepsReached(db.get(), path, &info));
    if (scope == RunScope::kEdges) NANPROV_RETURN_IF_ERROR(countSummarisedNotClean(db.get(), path, info, &run));
    NANPROV_RETURN_IF_ERROR(loadTrends(db.get(), path, &info));
    // Summaries, steps and trends derive from the calls: where they disagree, the report says so.
    for (std::string& line : derivedTableDisagreements(db.get(), info)) run.damage.push_back(std::move(line));
    // A summarised call was checked and counted, though its row is gone.
    const int64_t kept = info.calls_stored + info.summaries().calls;
    run.total_calls += kept;
    // Fewer rows than committed is damage; more is a live run's writer committing since the meta
    // was read (each statement reads its own snapshot).
    // The writer's running count; none when the meta is absent or no count.
    if (const std::optional<int64_t>& written = info.counters.calls_written; written && *written > kept) {
      run.damage.push_back("rank " + std::to_string(info.rank) + "'s store holds " + std::to_string(kept) +
                           " calls, but its writer committed " + std::to_string(*written) +
                           ": rows were deleted or lost, and what is counted is what is there");
    }
    // A writer whose writes failed may have lost any number of calls: its tally is not bounded by
    // what a process holds unstored.
    const int64_t dropped = info.write_failure ? int64_t{1} << 62 : info.counters.dropped_rows.value_or(0);
    if (std::optional<CallTally> tally =
            tallyOf(callTallyPathOf(path, info.rank), info.rank, kept, dropped, &run.damage)) {
      info.calls_begun = tally->begun;
      info.nonfinite_step_seen = tally->nonfinite_step;
    }
    run.ranks.push_back(std::move(info));
  }
  countTalliesWithoutStore(dirs.all, &run);
  for (const CallRecord& c : run.calls) {
    if (c.device.isCpu()) run.kernels.push_back(cpuKernelOf(c));
  }
  std::stable_sort(run.calls.begin(), run.calls.end(), byStepAndTime);
  std::stable_sort(run.kernels.begin(), run.kernels.end(), [](const KernelRecord& a, const KernelRecord& b) {
    return std::tie(a.rank, a.seq) < std::tie(b.rank, b.seq);
  });
  return run;
}

namespace {

// One rank's cursor and the call it stands on, for the merge across ranks.
struct RankStream {
  sqlite::Db db;
  std::optional<CallCursor> cursor;
  CallRecord head;
};

}  // namespace

Status forEachCall(const RunDirs& dirs, const CallQuery& query, const std::function<bool(const CallRecord&)>& visit) {
  NANPROV_ASSIGN_OR_RETURN(const std::vector<std::string> paths, rankStorePaths(dirs));
  if (paths.empty() && areRunDirs(dirs)) return Status::Ok();
  if (paths.empty()) return storesOf(dirs).status();
  CallFilter filter = CallFilter::matching(query);
  std::vector<std::unique_ptr<RankStream>> streams;
  auto advance = [](RankStream& r) -> StatusOr<bool> { return r.cursor->next(&r.head); };
  for (const std::string& path : paths) {
    RankInfo info;
    NANPROV_ASSIGN_OR_RETURN(auto db, openRankStore(path, &info));
    if (!query.wantsRank(info.rank)) continue;
    auto stream = std::make_unique<RankStream>();
    stream->db = std::move(db);
    NANPROV_ASSIGN_OR_RETURN(auto cursor, CallCursor::open(stream->db.get(), path, filter));
    stream->cursor.emplace(std::move(cursor));
    NANPROV_ASSIGN_OR_RETURN(auto more, advance(*stream));
    if (more) streams.push_back(std::move(stream));
  }
  // A k-way merge: the earliest head goes next (a linear scan; ranks are at most a few hundred).
  while (!streams.empty()) {
    size_t next = 0;
    for (size_t i = 1; i < streams.size(); ++i) {
      if (byStepAndTime(streams[i]->head, streams[next]->head)) next = i;
    }
    if (!visit(streams[next]->head)) return Status::Ok();
    NANPROV_ASSIGN_OR_RETURN(auto more, advance(*streams[next]));
    if (!more) streams.erase(streams.begin() + static_cast<std::ptrdiff_t>(next));
  }
  return Status::Ok();
}

StatusOr<RunData> loadRunWindow(const RunDirs& dirs, const CallQuery& query, int64_t max_calls,
                                const CallRecord* centre, bool* cut) {
  RunData run;
  run.dirs = dirs.all;
  run.dir = dirs.all.front();
  run.scope = RunScope::kTraced;
  run.settings = readRunFile(run.dir);
  *cut = false;
  // A sliding window: the oldest call leaves when it is full. Reading stops once half a window
  // followed the centre (without one: once the window is full, so it holds the first calls).
  std::deque<CallRecord> window;
  bool centre_seen = !centre;
  int64_t after = 0;
  const int64_t after_most = centre ? max_calls / 2 : max_calls;
  NANPROV_RETURN_IF_ERROR(forEachCall(dirs, query, [&](const CallRecord& c) {
    if (centre_seen && after >= after_most) {
      *cut = true;  // calls follow that the window does not hold
      return false;
    }
    window.push_back(c);
    if (static_cast<int64_t>(window.size()) > max_calls) {
      window.pop_front();
      *cut = true;
    }
    if (centre_seen) ++after;
    else centre_seen = c.rank == centre->rank && c.seq == centre->seq;
    return true;
  }));
  run.calls.assign(std::make_move_iterator(window.begin()), std::make_move_iterator(window.end()));
  std::map<int, std::vector<int64_t>> seqs;          // per rank, ascending (each rank streams by seq)
  std::map<int, std::pair<int64_t, int64_t>> steps;  // per rank, the window's first and last step
  for (const CallRecord& c : run.calls) {
    seqs[c.rank].push_back(c.seq);
    auto [it, fresh] = steps.try_emplace(c.rank, c.step, c.step);
    it->second = {std::min(it->second.first, c.step), std::max(it->second.second, c.step)};
  }
  NANPROV_ASSIGN_OR_RETURN(const std::vector<std::string> paths, rankStorePaths(dirs));
  for (const std::string& path : paths) {
    RankInfo info;
    NANPROV_ASSIGN_OR_RETURN(auto db, openRankStore(path, &info));
    if (!query.wantsRank(info.rank)) continue;
    if (auto mine = seqs.find(info.rank); mine != seqs.end()) {
      NANPROV_RETURN_IF_ERROR(loadKernels(db.get(), path, info.rank, &mine->second, &run.kernels));
      std::map<int64_t, int64_t> ends;
      NANPROV_RETURN_IF_ERROR(loadStepEnds(db.get(), path, &ends));
      const auto [first, last] = steps.at(info.rank);
      // From the step before the window's first (where its first step starts), or the nearest
      // recorded before it where the store budget thinned the steps table.
      auto from = ends.upper_bound(first - 1);
      if (from != ends.begin()) --from;
      for (auto it = from; it != ends.end() && it->first <= last; ++it) info.step_ends_ns.insert(*it);
      NANPROV_RETURN_IF_ERROR(loadSummarisedStretches(db.get(), path, first, last, &info.summarised_stretches));
    }
    run.ranks.push_back(std::move(info));  // its meta, the window's step ends and summaries; no counts (a scan each)
  }
  for (const CallRecord& c : run.calls) {
    if (c.device.isCpu()) run.kernels.push_back(cpuKernelOf(c));
  }
  std::stable_sort(run.kernels.begin(), run.kernels.end(), [](const KernelRecord& a, const KernelRecord& b) {
    return std::tie(a.rank, a.seq) < std::tie(b.rank, b.seq);
  });
  return run;
}

}  // namespace nanprov::store
