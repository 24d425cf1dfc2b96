// StoreWriter: the probes' only way to persist. A background thread batches rows into WAL
// transactions; a flush is requested at every optimizer step and done synchronously at close().
// Whatever was committed survives the process being killed.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/logit_trend.h"
#include "base/records/call_event.h"
#include "base/records/call_record.h"
#include "base/records/collective_record.h"
#include "base/records/replica_digest.h"
#include "base/records/run_counters.h"
#include "base/status.h"
#include "store/write_failure.h"

namespace nanprov::store {

// A rank store's byte budget when nanprov run is given none (--store-budget).
inline constexpr int64_t kDefaultStoreBudgetBytes = int64_t{1} << 30;

// Hears each trend warning (base/logit_trend.h) once it is in the store, on the writer's thread:
// the training never waits on it, and no value is read from the device for it.
using TrendSink = std::function<void(const TrendWarning&)>;
// Hears the first write the store could not make (store/write_failure.h), with SQLite's words for
// it, on the writer's thread: the run says it when it happens, and training goes on.
using WriteFailureSink = std::function<void(const WriteFailure&, const std::string& error)>;

class StoreWriter {
 public:
  // Creates or opens `path`, applies the schema and writes `meta` (key → value: the rank's identity
  // and environment) and `counters` into it. With a `budget_bytes` (nanprov run --store-budget),
  // the store stays under it for any run length: at step boundaries the clean calls of old steps
  // become per-step summaries (store/budget_keeper.h). Every call also feeds its layer's trend
  // (store/trend_keeper.h); `on_warning` hears its warnings. A write that fails (a full disk) drops
  // its rows, is recorded beside the store (store/write_failure.h) and said to `on_failure`, and
  // the writer goes on with the next batch.
  static StatusOr<std::unique_ptr<StoreWriter>> open(const std::string& path,
                                                     const std::map<std::string, std::string>& meta,
                                                     int64_t budget_bytes = 0, TrendSink on_warning = {},
                                                     const RunCounters& counters = {},
                                                     WriteFailureSink on_failure = {});
  ~StoreWriter();  // close()s
  StoreWriter(const StoreWriter&) = delete;
  StoreWriter& operator=(const StoreWriter&) = delete;

  // Never blocks on disk; safe from any thread. A call takes no lock and allocates nothing while
  // the writer keeps up (the probes' steady state).
  void append(const CallEvent& call);
  void append(const CallRecord& record);  // tests and the store benchmark
  void appendKernels(std::vector<KernelRecord> kernels);
  void appendCapture(CaptureRecord capture);
  void appendSentinel(std::vector<SentinelRecord> findings);
  void appendModuleChecks(std::vector<ModuleCheckRecord> checks);
  void appendCollectives(std::vector<CollectiveRecord> collectives);
  // One row per parameter, once per step (base/records/replica_digest.h).
  void appendReplicaDigests(std::vector<ReplicaDigestRecord> digests);
  // Written with the next batch; a later value for the same key replaces it. The run's counters
  // go through setCounters: this is for the rank's identity and environment, which are text.
  void setMeta(const std::string& key, const std::string& value);
  // The fields `counters` says, written with the next batch (store/run_counters_meta.h spells
  // them); later values replace earlier ones, and a value said again unchanged is not rewritten.
  void setCounters(const RunCounters& counters);
  // The rank the process learnt after its store was made: the rows written so far, and every
  // call's row from now on, carry it (with the next batch).
  void setRank(int rank);
  void stepEnded(int64_t step, int64_t end_ns);
  void requestFlush();

  // Writes everything pending, stops the thread, leaves a single self-contained file.
  // Later calls are no-ops. Returns the first error the writer met, if any.
  Status close();

  // Rows dropped because the writer failed; reported in meta at close.
  int64_t droppedRows() const;
  // The first write the store could not make, if any (kept beside the store too).
  std::optional<WriteFailure> writeFailure() const;

  // Calls appended and not yet taken by the writer thread (the probes never wait on it; the store
  // benchmark does, to measure the writer's sustained rate).
  size_t pendingCalls() const;

 private:
  struct Impl;
  explicit StoreWriter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace nanprov::store
