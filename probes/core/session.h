// Session: the LibTorch-free part of the probes' state inside one training process: where the
// run is recorded (the store, the call tally, the unprobed counts), how calls are named
// (CallIdentity), and which are captured (CapturePolicy). Its owner is the process's Probes
// (probes/libtorch/probes.h), which also holds the tracer, the device checks, the captures and the
// gradient sentinel; a test can make its own. Lifecycle: uninitialized → active (start()) →
// finalized (finalize(), once, from exit); calls after finalize are no-ops. Failures are logged
// once and the training carries on.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/records/call_event.h"
#include "base/records/call_record.h"
#include "base/records/collective_record.h"
#include "base/records/replica_digest.h"
#include "base/records/run_counters.h"
#include "base/status.h"
#include "probes/core/call_identity.h"
#include "probes/core/capture_policy.h"
#include "probes/core/injection.h"
#include "probes/core/process_rank.h"

namespace nanprov::store {
class MappedCounters;
class StoreWriter;
}  // namespace nanprov::store

namespace nanprov::probes {

class Session {
 public:
  Session();
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Reads NANPROV_RUN_DIR, NANPROV_TRAIL, NANPROV_INJECT, NANPROV_CAPTURE*, RANK, LOCAL_RANK and WORLD_SIZE.
  Status start();
  bool active() const { return state_.load(std::memory_order_acquire) == State::kActive; }
  // Completes pending device work (when `collect`), writes what is queued and closes the store.
  // Without `collect` only the store is closed: the path for a process that is ending without
  // Python (C's exit(), SIGTERM), where LibTorch and CUDA may already be torn down; calls whose
  // checks were still in flight are then counted by the tally as not stored.
  void finalize(bool collect = true);
  // From finalize() on: the process is exiting, and Python (a --probe-op's kernel) may be gone.
  bool closing() const { return closing_.load(std::memory_order_acquire); }

  CallIdentity& identity() { return identity_; }
  const std::vector<InjectionSpec>& injections() const { return injections_; }
  CapturePolicy& capturePolicy() { return capture_policy_; }
  // The rank calls are named under: the process group's once known, the environment's guess before.
  int rank() const { return rank_.load(std::memory_order_relaxed); }
  // The default process group came up (the bootstrap saw it): this process is `rank` of
  // `world_size`, `local_rank` on its node (-1: unknown, the guess stands). What was recorded
  // before becomes that rank's (process_rank.h). Later reports of the same rank are no-ops.
  void learnRank(int rank, int world_size, int local_rank);
  const std::string& runDir() const { return run_dir_; }

  // Queues a call for the store, as its maker left it (rank and health set: CallRecorder in
  // probes/libtorch, eventFor and its checked-call sink). The store file is created by the first call, so
  // processes that never run attention (a torchrun launcher) leave no file behind.
  void record(const CallEvent& call);
  void recordKernels(std::vector<KernelRecord> kernels);
  void recordCapture(CaptureRecord capture);
  void recordSentinel(std::vector<SentinelRecord> findings);
  void recordModuleChecks(std::vector<ModuleCheckRecord> checks);
  void recordCollectives(std::vector<CollectiveRecord> collectives);
  void recordReplicaDigests(std::vector<ReplicaDigestRecord> digests);
  // A probed call began: counted in rank-<r>.tally, which outlives any death of the process, so
  // the report can say how many calls never reached the store. `n` = -1 withdraws one that will
  // never be stored because it did not run (attention captured into a CUDA graph: its replays
  // are the calls, each counted as it is named).
  void callBegun(int64_t n = 1);
  // How many calls began on this thread: the trail tells whether a module that looks like
  // attention ran any attention nanprov checks.
  static int64_t callsBegunOnThread();

  // This process is a DataLoader worker of its rank (the bootstrap says so as the worker loop
  // starts, spawned or forked). A worker checks nothing and never takes its rank's store, which
  // belongs to the training process; each attention call it runs is counted instead, for its
  // rank, in rank-<r>.worker-calls, so the report names it as attention that ran unchecked and
  // never calls the run clean by omission. Lock-free: a forked child may hold no lock.
  void becomeWorker();
  bool inWorker() const { return worker_.load(std::memory_order_relaxed); }
  void countWorkerCall(int64_t n = 1);
  // A fact about the store's rank. It creates no store: until the first call, capture, kernel,
  // sentinel finding or unchecked attention is recorded it waits, and a process that records none
  // of those (a DataLoader worker started with spawn, a helper process of the same rank) leaves
  // no store and takes no rank's store name.
  void setMeta(const std::string& key, const std::string& value);
  // The fields of the run's counters `counters` says, as setMeta does (waiting for the store);
  // later values replace earlier ones. The rank's counters go here, its identity to setMeta.
  void setCounters(const RunCounters& counters);
  // An optimizer step completed; `optimizer_steps` is the count so far.
  void stepEnded(int64_t optimizer_steps);
  // A new step began (an optimizer step, or the next inference forward pass): device work of the
  // step before is flushed and the step is marked in the store.
  void stepBegan(int64_t step);

  // Attention that was recognised but could not be checked, counted by what it was (e.g.
  // "aten::_native_multi_head_attention"). Written to the store (RunCounters::unprobed) at step
  // boundaries and exit, so the report never calls a run clean that it did not check. The step it
  // was first seen in goes beside it (unprobed_first_step): the gradient sentinel may blame code
  // outside attention only for a step in which no attention ran unchecked.
  void countUnprobed(const std::string& what, int64_t n = 1);
  // How many times countUnprobed ran on this thread: a caller tells whether a call it wrapped
  // was counted as unchecked somewhere underneath.
  static int64_t unprobedCountedOnThread();

  // Runs at every step boundary and once at exit (at_exit = true), before the store closes:
  // where the LibTorch side completes asynchronous checks and collects traced kernels.
  using FlushHook = void (*)(bool at_exit);
  void setFlushHook(FlushHook hook) { flush_hook_.store(hook); }

  // The module path of the innermost module running on this thread, asked from Python through
  // the resolver (empty without one). Only forward calls ask: a backward inherits its forward's.
  using ModuleResolver = int (*)(char* buffer, size_t capacity);
  void setModuleResolver(ModuleResolver resolve) { module_resolver_.store(resolve); }
  std::string modulePath() const;

 private:
  enum class State { kUninitialized, kActive, kFinalized };
  store::StoreWriter* writer();  // nullptr when the store cannot be written; creates it on first use
  void storeRefused(const std::string& why);
  // A process with no group keeps the environment's guess, from its first optimizer step on (no
  // training steps before its group is up) or its exit. Both take writer_mu_.
  void settleRank();
  void claimRank();  // links the rank's names to the files made under the process's (writer_mu_ held)
  std::string ownName(const std::string& rank_name, const std::string& process_name) const;
  void writeCounters();
  void countUnseenBackwards();

  std::atomic<State> state_{State::kUninitialized};
  std::atomic<bool> closing_{false};
  std::atomic<FlushHook> flush_hook_{nullptr};
  std::atomic<ModuleResolver> module_resolver_{nullptr};
  std::string run_dir_;
  int owner_pid_ = 0;
  bool trail_ = false;  // NANPROV_TRAIL: written into the store's meta
  RankEnv env_;         // world size and local rank (writer_mu_); the rank is rank_
  std::atomic<int> rank_{0};
  std::atomic<RankSource> rank_source_{RankSource::kGuess};
  RankLink store_link_, tally_link_;  // the rank's names for files made before it was known (writer_mu_)
  std::vector<InjectionSpec> injections_;
  CallIdentity identity_;
  CapturePolicy capture_policy_;

  std::mutex writer_mu_;                             // taken to open the store, once; calls read open_writer_
  std::map<std::string, std::string> pending_meta_;  // setMeta before the store exists (writer_mu_)
  RunCounters pending_counters_;                     // setCounters before the store exists (writer_mu_)
  std::unique_ptr<store::StoreWriter> writer_;
  std::atomic<store::StoreWriter*> open_writer_{nullptr};
  bool writer_failed_ = false;
  // The call tally, opened by the first call (nullptr: not yet, or it could not be made).
  store::MappedCounters* tally();
  // The store may never get the rows that say so (a kill, a full disk): the tally keeps the step.
  void sawNonFinite(int64_t step);
  std::atomic<store::MappedCounters*> tally_{nullptr};  // created by the first call; never freed (calls may race exit)
  std::atomic<bool> tally_failed_{false};
  std::atomic<bool> worker_{false};
  std::atomic<store::MappedCounters*> worker_calls_{nullptr};  // created by a worker's first call; never freed
  std::atomic<bool> worker_calls_failed_{false};

  std::mutex unprobed_mu_;
  std::map<std::string, int64_t> unprobed_;
  std::map<std::string, int64_t> unprobed_first_step_;
  bool unprobed_dirty_ = false;
};

}  // namespace nanprov::probes
