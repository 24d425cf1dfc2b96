// Reads a run: every rank store of a run directory, merged. Read-only; a missing, empty or
// corrupt store is a Status with one clear line, never a crash.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/logit_trend.h"
#include "base/records/call_record.h"
#include "base/records/collective_record.h"
#include "base/records/device_identity.h"
#include "base/records/replica_digest.h"
#include "base/records/run_counters.h"
#include "base/records/summarised.h"
#include "base/status.h"
#include "store/run_dir.h"
#include "store/run_file.h"
#include "store/write_failure.h"

namespace nanprov::store {

// What the report calls the attention DataLoader worker processes ran: counted, never checked.
inline constexpr const char* kWorkerAttention = "attention in DataLoader worker processes";

struct RankInfo {
  int rank = 0;
  std::string path;
  // The store's meta table as written, every row: the rank's identity (host, world_size, ...)
  // and environment (torch, gpu, ...) are read from it as text; the run's counters are read
  // from `counters`, parsed once (store/run_counters_meta.h).
  std::map<std::string, std::string> meta;
  RunCounters counters;
  // Which host and GPU the rank ran on, read from the meta (host, gpu_uuid, pci_bus_id, driver,
  // cuDNN); a CPU rank's is its host and "cpu".
  DeviceIdentity device;
  // Why the budget's summary counts could not be read ("" when they could): the store is refused.
  std::string counters_unreadable;
  // What the store budget folded into step_summaries (their rows are gone, their counts are not);
  // all 0 when it summarised nothing.
  BudgetSummaries summaries() const { return counters.summarised.value_or(BudgetSummaries{}); }
  int64_t steps = 0;  // step boundaries recorded (the steps table's rows, and those the store budget thinned)
  // RunScope::kAll only: when each step ended (the steps table: the optimizer's step post hook,
  // or in inference the start of the next forward pass), step → CLOCK_REALTIME ns.
  std::map<int64_t, int64_t> step_ends_ns;
  int64_t calls_stored = 0;  // call rows the store holds, counted
  // The steps the store budget's summaries span (step_summaries' first and last rows); what
  // they count is in counters.summarised (summaries()).
  int64_t summarised_first_step = -1, summarised_last_step = -1;
  // loadRunWindow only: the summarised stretches within the window's steps, in step order.
  std::vector<SummarisedStretch> summarised_stretches;
  // From rank-<r>.tally; none in runs older than it, or when it contradicts the store (damage).
  std::optional<int64_t> calls_begun;
  // Also from the tally: the earliest step at which the process saw a non-finite value (a call not
  // clean, the sentinel's gradients), whether or not its rows reached the store.
  std::optional<int64_t> nonfinite_step_seen;
  // The first write its writer could not make (a full disk, `ulimit -f`): the store is incomplete
  // from that step on (store/write_failure.h). None when every write was made.
  std::optional<WriteFailure> write_failure;
  // Each layer's trend, by layer then step, and the warnings the rank said (base/logit_trend.h).
  std::vector<TrendPoint> trends;
  std::vector<TrendWarning> trend_warnings;
};

// How much of a run to read. kEdges is what the report needs, at any run size: per rank the first
// call that is not clean and the first source edge (found through the store's index), the calls
// around them it shows, and totals. kTraced is the calls CUPTI traced, with their kernels: a few
// steps' worth, what `kernels` infers the others' from. kAll is every call (small runs and tests;
// commands stream calls with forEachCall instead).
enum class RunScope { kAll, kTraced, kEdges };

// Over the calls that are not clean, counted by the store (kEdges) rather than loaded.
struct NotClean {
  int64_t calls = 0;
  std::set<int64_t> layers;
  std::set<int> ranks;
};

struct RunData {
  std::string dir;                // the first directory given: the run's name in what is printed
  std::vector<std::string> dirs;  // every directory of the job (one per node); dir is dirs[0]
  RunFile settings;               // run.json: the command, the audit's settings, how the training ended
  RunScope scope = RunScope::kAll;
  int64_t total_calls = 0;  // checked calls over all ranks, loaded or not
  std::vector<RankInfo> ranks;
  std::vector<CallRecord> calls;         // all ranks, in the scope's subset, ordered by (step, start_ns, rank, seq)
  NotClean not_clean;                    // kEdges only
  std::vector<KernelRecord> kernels;     // ordered by rank, then seq, then start; a CPU call's is its op
  std::vector<CaptureRecord> captures;   // per rank in the order decided
  std::vector<SentinelRecord> sentinel;  // per rank: the first step whose gradients went non-finite
  // --trail: module calls whose outputs went non-finite, per rank in the order they ended.
  std::vector<ModuleCheckRecord> module_checks;
  // Collectives that carried a non-finite value in or out, per rank in the order they were issued.
  std::vector<CollectiveRecord> collectives;
  // Each replicated parameter's digest after each step, per rank in the order written (the model's
  // parameter order within a step); the report compares the ranks that replicate each other.
  std::vector<ReplicaDigestRecord> replica_digests;
  int64_t calls_begun_without_store = 0;           // tallied by ranks that died before creating their store
  std::map<int, int64_t> nonfinite_without_store;  // and the step their tally saw non-finite values at, by rank
  std::map<int, std::string> unrecorded;           // ranks whose workers could not write their store → why
  // What in the run's files contradicts itself, one line each (a store missing rows its writer
  // committed, a tally below what was stored or past any process's reach): said once in the
  // report; the counts shown are what is there.
  std::vector<std::string> damage;
  // Attention calls the ranks' DataLoader worker processes ran, unchecked (rank-<r>.worker-calls).
  std::map<int, int64_t> worker_calls;

  // The job's world size as its ranks recorded it (the largest; 0 when no store says).
  int worldSize() const;
  // Ranks of the job with no store read: below the world size and absent, or noted unrecorded.
  std::vector<int> missingRanks() const;
  // Whether the ranks ran on more than one host: their clocks then differ, and calls of two hosts
  // are ordered by step first, by time only within a step.
  bool acrossHosts() const;
  // The directory holding `rank`'s store (its captures and tally are beside it).
  std::string dirOf(int rank) const;

  // Attention recognised but not checked, summed over ranks: what → count (RunCounters::unprobed,
  // and kWorkerAttention for the DataLoader workers' calls).
  std::map<std::string, int64_t> unprobed() const;
  // The earliest step, over ranks, in which each kind of unchecked attention was first seen
  // (RunCounters::unprobed_first_step); a kind a store older than that count names is taken as step 0.
  std::map<std::string, int64_t> unprobedFirstSteps() const;
  // Calls the probes began that never reached a store, over all ranks: the process ended (by
  // SIGKILL, or a path that ran no exit hook) before the writer committed them, or its writes
  // failed (RankInfo::write_failure).
  int64_t callsNotStored() const;
  // The earliest (step, rank) at which a rank's process saw a non-finite value, as its tally says:
  // with no stored call or finding to show it, the rows that would have were lost.
  std::optional<std::pair<int64_t, int>> earliestNonFiniteTallied() const;
  // Each rank whose store's writes failed: "rank 0: the store is incomplete from step 12: the disk
  // filled", in rank order.
  std::vector<std::string> incompleteStores() const;
  // The calls summarised over all ranks; calls 0 when nothing was.
  Summarised summarised() const;
  // Whether any rank ran with --trail (RunCounters::trail).
  bool trailOn() const;
  // What a step counts: optimizer steps (training), or forward passes (inference, no optimizer).
  StepUnit stepUnit() const;

  // The capture of one call: the written one when there is one, else why it was skipped.
  const CaptureRecord* captureOf(int rank, int64_t seq) const;
  // A capture's file, for `nanprov replay`: its stored path is relative to its rank's run directory.
  std::string capturePath(const CaptureRecord& capture) const;

  // The kernels of one call, in launch order.
  std::vector<const KernelRecord*> kernelsOf(int rank, int64_t seq) const;
};

// A run directory whose processes recorded nothing (no rank store: no attention ran, or the
// training died first) loads as a run with no ranks; a directory that is not a run is an error.
// Several directories (one job's, one per node) load as one run, their ranks merged.
StatusOr<RunData> loadRun(const RunDirs& dirs, RunScope scope = RunScope::kAll);

// Which calls to stream: every condition given must hold.
struct CallQuery {
  std::optional<int> rank;
  std::set<int> ranks;  // any of these; empty: every rank
  std::optional<int64_t> layer, call, step;
  std::optional<int64_t> first_step, last_step;  // a window of steps, both ends included
  std::optional<Phase> phase;
  std::string backend;
  std::string module_glob;  // shell pattern over the module path ("layers.3.*"); "" matches any
  bool not_clean = false;   // only calls that are not clean, through the store's index over them

  bool wantsRank(int r) const { return (!rank || *rank == r) && (ranks.empty() || ranks.count(r)); }
};

// Streams the run's calls that match, with their tensors, one at a time: ranks merged by (step,
// start_ns, rank, seq), each rank in call order. Memory stays flat at any run size. `visit`
// returns false to stop early.
Status forEachCall(const RunDirs& dirs, const CallQuery& query, const std::function<bool(const CallRecord&)>& visit);

// The calls that match `query`, at most `max_calls` of them in (step, time) order, loaded with
// their kernels, their ranks' meta and the ends of the steps they span (no counts: total_calls
// and each rank's steps and calls_stored stay 0; loadRun gives them): a window of a run of any
// length, in memory bounded by `max_calls`. The first that match, or, given `centre` (a call by
// rank and seq), those around it: up to half the window after it, the rest before. *cut says
// whether calls that match were left out.
StatusOr<RunData> loadRunWindow(const RunDirs& dirs, const CallQuery& query, int64_t max_calls,
                                const CallRecord* centre, bool* cut);

// A CPU call's kernel: its ATen op, timed by the call itself (stores do not repeat it).
KernelRecord cpuKernelOf(const CallRecord& call);

// Result of a read-only query over all ranks (`nanprov sql`).
struct QueryResult {
  std::vector<std::string> columns;
  std::vector<std::vector<std::optional<std::string>>> rows;  // nullopt is SQL NULL
  std::vector<bool> numeric;                                  // per column, from the first row
};

// Runs `sql` over the run's stores, which appear as the tables calls, tensors, kernels, captures, steps and meta
// (the union of all ranks; meta gains a rank column). Statements that write are refused.
// What one `nanprov sql` query may take; 0 is no bound.
struct QueryLimits {
  double timeout_seconds = 0;
  int64_t max_memory_bytes = 0;
};

StatusOr<QueryResult> queryRun(const RunDirs& dirs, const std::string& sql, const QueryLimits& limits = {});

}  // namespace nanprov::store
