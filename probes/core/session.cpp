#include "probes/core/session.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <utility>

#include "base/env.h"
#include "base/log_once.h"
#include "base/records/call_health.h"
#include "base/records/device_identity.h"
#include "base/text.h"
#include "base/wall_clock.h"
#include "store/mapped_counters.h"
#include "store/run_dir.h"
#include "store/writer.h"

namespace nanprov::probes {
namespace {

// The session that started in this process: a forked child (a DataLoader worker) inherits it but
// not the writer thread, and must not record.
std::atomic<Session*> g_started{nullptr};
void disableInForkedChild() {
  if (Session* s = g_started.load()) s->finalize();
}

}  // namespace

// The first trend warning of the process, said while the training runs; the store keeps every
// one, and the report lists them. Once: a rank whose logits grow says so for each layer otherwise.
// When the values then go non-finite, the writer hands it again with that step: said again, with
// how many steps before them it came (once; a warning said after them says so at once).
// The module name is the model's (any ModuleDict key): printed escaped, as the report prints it.
static void sayTrendWarning(const TrendWarning& w) {
  static std::atomic<bool> said{false}, said_again{false};
  const std::string text = printable(w.text());
  if (!said.exchange(true)) {
    const std::string after = w.nonfinite_step ? " (" + stepsBeforeText(w.step, *w.nonfinite_step) + ")" : "";
    std::fprintf(
        stderr,
        "nanprov: warning: rank %d, step %lld: %s%s. A trend, not a verdict: `nanprov report` shows each layer's.\n",
        w.rank, static_cast<long long>(w.step), text.c_str(), after.c_str());
    return;
  }
  if (!w.nonfinite_step || said_again.exchange(true)) return;
  std::fprintf(stderr, "nanprov: warning: rank %d, step %lld: %s: %s, at step %lld.\n", w.rank,
               static_cast<long long>(w.step), text.c_str(), stepsBeforeText(w.step, *w.nonfinite_step).c_str(),
               static_cast<long long>(*w.nonfinite_step));
}

// A store that could not be written (a full disk): said once, loudly, when it happens. The
// training goes on; its calls are still checked and counted, and the report says from which step
// the store lacks them.
static void sayWriteFailure(int rank, const store::WriteFailure& failure, const std::string& error) {
  std::fprintf(stderr,
               "nanprov: rank %d: %s (%s); training continues, and its calls are counted but may not be stored\n", rank,
               printable(store::writeFailureText(failure)).c_str(), printable(error).c_str());
}

Session::Session() = default;
Session::~Session() {
  Session* self = this;
  g_started.compare_exchange_strong(self, nullptr);  // a fork after this must not reach freed memory
}

Status Session::start() {
  State expected = State::kUninitialized;
  if (!state_.compare_exchange_strong(expected, State::kActive)) return Status::Ok();
  const char* dir = std::getenv("NANPROV_RUN_DIR");
  if (!dir || !*dir) {
    state_ = State::kFinalized;
    return Status::Error("NANPROV_RUN_DIR is not set; start training under `nanprov run`");
  }
  run_dir_ = dir;
  env_ = rankFromEnvironment();
  rank_ = env_.rank;
  // --trail: in the store's meta from its creation, so a run whose modules all ran compiled (no
  // module checked) still reads as one that asked for the trail.
  if (const char* trail = std::getenv("NANPROV_TRAIL"); trail && std::string(trail) == "1") trail_ = true;
  if (const char* inject = std::getenv("NANPROV_INJECT"); inject && *inject) {
    auto specs = parseInjections(inject);
    if (!specs.ok()) {
      state_ = State::kFinalized;
      return specs.status();
    }
    injections_ = std::move(*specs);
  }
  auto plan = capturePlanFromEnvironment();
  if (!plan.ok()) {
    state_ = State::kFinalized;
    return plan.status();
  }
  CapturePolicy::ProgressReader progress;
  if (plan->audit.on) {
    // The judge in `nanprov run` counts what it judged of this rank's audit captures here; the
    // rotation paces itself by it (probes/core/capture_policy.h).
    auto counters = store::MappedCounters::open(
        (std::filesystem::path(run_dir_) / store::auditProgressName(rank())).string(), store::kAuditProgressSlots);
    if (counters.ok()) {
      std::shared_ptr<store::MappedCounters> shared = std::move(*counters);
      progress = [shared] {
        return AuditProgress{shared->get(store::kAuditsJudged), shared->get(store::kRotationJudgeNs)};
      };
    } else {
      logOnce("audit progress", "the audit cannot pace its rotation (" + counters.status().message() +
                                    "): after the first pass it judges only with --audit-every or --audit-budget 100");
    }
  }
  capture_policy_.configure(std::move(*plan), std::move(progress));
  owner_pid_ = getpid();
  if (g_started.exchange(this) == nullptr) pthread_atfork(nullptr, nullptr, &disableInForkedChild);
  return Status::Ok();
}

store::StoreWriter* Session::writer() {
  if (store::StoreWriter* w = open_writer_.load(std::memory_order_acquire)) return w;  // every call after the first
  if (inWorker()) return nullptr;  // a DataLoader worker never takes its rank's store
  std::lock_guard<std::mutex> lock(writer_mu_);
  if (writer_ || writer_failed_) return writer_.get();
  const RankSource source = rank_source_.load();
  if (source == RankSource::kGuess) {
    // The environment again, as the store is made: Lightning's launcher sets WORLD_SIZE and
    // LOCAL_RANK in its own process only after torch was imported, when the session began.
    env_ = rankFromEnvironment();
    rank_ = env_.rank;
  }
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  std::map<std::string, std::string> meta = {
      {kMetaHost, host},
      {"pid", std::to_string(getpid())},
      {"started_ns", std::to_string(wallClockNs())},
  };
  // Before its rank is known the process writes under its own name, with the guess beside.
  if (source == RankSource::kGuess) {
    meta["rank_guess"] = std::to_string(rank());
  } else {
    meta["rank"] = std::to_string(rank());
    meta["rank_source"] = rankSourceName(source);
  }
  meta["local_rank"] = std::to_string(env_.local_rank);
  meta["world_size"] = std::to_string(env_.world_size);
  meta.merge(pending_meta_);  // what was said before there was a store (the keys above win)
  pending_meta_.clear();
  // Which job the rank belongs to, for readers given one run directory per node: the launcher's
  // run id and the rendezvous master every rank of the job shares. Slurm's job and step
  // ("slurm:4242.0") first: it tells two jobs apart where torchrun's default --rdzv-id ("none") does not.
  if (const char* job = std::getenv("SLURM_JOB_ID"); job && *job) {
    const char* step = std::getenv("SLURM_STEP_ID");
    meta["launcher_run_id"] = std::string("slurm:") + job + (step && *step ? std::string(".") + step : "");
  } else if (const char* id = std::getenv("TORCHELASTIC_RUN_ID"); id && *id) {
    meta["launcher_run_id"] = id;
  }
  const char* master_addr = std::getenv("MASTER_ADDR");
  const char* master_port = std::getenv("MASTER_PORT");
  if (master_addr && *master_addr && master_port && *master_port) {
    meta["master"] = std::string(master_addr) + ":" + master_port;
  }
  RunCounters counters = std::exchange(pending_counters_, {});
  counters.trail = trail_;
  std::string path =
      (std::filesystem::path(run_dir_) / ownName(store::rankStoreName(rank()), store::processStoreName(getpid())))
          .string();
  // nanprov run --store-budget; a process started without nanprov run keeps the default.
  auto opened = store::StoreWriter::open(
      path, meta, envInteger("NANPROV_STORE_BUDGET", store::kDefaultStoreBudgetBytes, 0), sayTrendWarning, counters,
      [this](const store::WriteFailure& f, const std::string& error) { sayWriteFailure(rank(), f, error); });
  if (!opened.ok()) {
    writer_failed_ = true;
    storeRefused(opened.status().message());
    return nullptr;
  }
  writer_ = std::move(*opened);
  if (source == RankSource::kGuess) store_link_ = RankLink(run_dir_, store::processStoreName(getpid()));
  open_writer_.store(writer_.get(), std::memory_order_release);
  return writer_.get();
}

// The rank's name when the rank is known, else the process's own.
std::string Session::ownName(const std::string& rank_name, const std::string& process_name) const {
  return rank_source_.load() == RankSource::kGuess ? process_name : rank_name;
}

void Session::learnRank(int rank, int world_size, int local_rank) {
  if (!active() || inWorker() || rank < 0 || world_size < 1 || rank >= world_size) return;
  std::lock_guard<std::mutex> lock(writer_mu_);
  if (rank_source_.load() == RankSource::kProcessGroup) return;
  // Settled on its guess by an optimizer step without a group, it wrote under that rank's name
  // from then on: a group that names another rank later cannot rename what is written.
  if (rank_source_.load() == RankSource::kSettled && rank != rank_.load() && writer_ &&
      store_link_.processName().empty()) {
    logOnce("late group",
            "the process group came up after this process trained without one: it stays recorded as rank " +
                std::to_string(rank_.load()) + ", though the group says " + std::to_string(rank));
    return;
  }
  rank_ = rank;
  env_.world_size = world_size;
  if (local_rank >= 0) env_.local_rank = local_rank;
  else if (!env_.said) env_.local_rank = rank;  // spawned on one host (torch.multiprocessing.spawn)
  rank_source_ = RankSource::kProcessGroup;
  claimRank();
}

void Session::settleRank() {
  std::lock_guard<std::mutex> lock(writer_mu_);
  if (rank_source_.load() != RankSource::kGuess) return;
  rank_source_ = RankSource::kSettled;
  claimRank();
}

void Session::claimRank() {
  if (!writer_ && !tally_.load()) return;  // nothing made yet: the files take the rank's names
  const int rank = rank_.load();
  if (writer_) {
    writer_->setRank(rank);
    writer_->setMeta("rank", std::to_string(rank));
    writer_->setMeta("rank_source", rankSourceName(rank_source_.load()));
    writer_->setMeta("world_size", std::to_string(env_.world_size));
    writer_->setMeta("local_rank", std::to_string(env_.local_rank));
  }
  for (auto [link, name] :
       {std::pair{&store_link_, store::rankStoreName(rank)}, std::pair{&tally_link_, store::callTallyName(rank)}}) {
    if (link->processName().empty()) continue;
    if (Status st = link->link(name); !st.ok()) {
      storeRefused(st.message() + "; this process's records stay in " + link->processName());
      return;
    }
  }
}

// Said once and loudly: a rank that trains unrecorded leaves a hole in the run that a quiet line
// in a busy log would hide. The note beside the stores lets the report name the rank and why.
void Session::storeRefused(const std::string& why) {
  const std::string number = std::to_string(rank());
  std::fprintf(stderr,
               "nanprov: ==================================================================\n"
               "nanprov: RANK %s IS NOT RECORDED: cannot write its store; training continues unrecorded\n"
               "nanprov:   %s\n"
               "nanprov: ==================================================================\n",
               number.c_str(), printable(why).c_str());
  std::ofstream note(std::filesystem::path(run_dir_) / store::unrecordedNoteName(rank()), std::ios::trunc);
  note << "pid " << getpid() << ": " << why << "\n";
}

static thread_local int64_t t_calls_begun = 0;

int64_t Session::callsBegunOnThread() { return t_calls_begun; }

store::MappedCounters* Session::tally() {
  store::MappedCounters* tally = tally_.load(std::memory_order_acquire);
  if (tally || tally_failed_.load(std::memory_order_relaxed)) return tally;
  std::lock_guard<std::mutex> lock(writer_mu_);
  tally = tally_.load(std::memory_order_acquire);
  if (tally) return tally;
  const std::string name = ownName(store::callTallyName(rank()), store::processTallyName(getpid()));
  auto opened = store::MappedCounters::open((std::filesystem::path(run_dir_) / name).string(), store::kCallTallySlots);
  if (opened.ok()) {
    if (rank_source_.load() == RankSource::kGuess) tally_link_ = RankLink(run_dir_, name);
    tally_.store(tally = opened->release(), std::memory_order_release);
  } else if (!tally_failed_.exchange(true)) {
    logOnce("tally", "calls not tallied: " + opened.status().message());
  }
  return tally;
}

void Session::callBegun(int64_t n) {
  if (!active()) return;
  if (n > 0) t_calls_begun += n;
  if (store::MappedCounters* counts = tally()) counts->add(store::kCallsBegun, n);
}

void Session::sawNonFinite(int64_t step) {
  if (store::MappedCounters* counts = tally())
    counts->keepSmallest(store::kFirstNonFiniteStep, std::max<int64_t>(0, step) + 1);
}

void Session::becomeWorker() {
  if (worker_.exchange(true)) return;
  // From here writer() opens no store. Spawned, the worker started its session like any process
  // and has opened none (its first attention call would have): it stops. A store opened before
  // the worker loop (attention at import) is closed. Forked, the child's session was finalized.
  if (!open_writer_.load(std::memory_order_acquire)) {
    State expected = State::kActive;
    state_.compare_exchange_strong(expected, State::kFinalized);
  } else if (active()) {
    finalize();
  }
}

void Session::countWorkerCall(int64_t n) {
  if (!inWorker() || run_dir_.empty() || worker_calls_failed_.load(std::memory_order_relaxed)) return;
  store::MappedCounters* counter = worker_calls_.load(std::memory_order_acquire);
  if (!counter) {
    auto opened =
        store::MappedCounters::open((std::filesystem::path(run_dir_) / store::workerCallsName(rank())).string());
    if (!opened.ok()) {
      // Not counted, and not tried again on every call (no log: a forked child may hold no lock).
      worker_calls_failed_.store(true, std::memory_order_relaxed);
      return;
    }
    store::MappedCounters* fresh = opened->release();
    if (worker_calls_.compare_exchange_strong(counter, fresh)) counter = fresh;
    else delete fresh;  // another thread opened it first
  }
  counter->add(0, n);
}

void Session::record(const CallEvent& call) {
  if (!active()) return;
  if (call.health != 0) sawNonFinite(call.step);
  if (store::StoreWriter* w = writer()) w->append(call);
}

void Session::recordKernels(std::vector<KernelRecord> kernels) {
  if (!active() || kernels.empty()) return;
  for (KernelRecord& k : kernels) k.rank = rank();
  if (store::StoreWriter* w = writer()) w->appendKernels(std::move(kernels));
}

void Session::recordCapture(CaptureRecord capture) {
  if (!active()) return;
  capture.rank = rank();
  if (store::StoreWriter* w = writer()) w->appendCapture(std::move(capture));
}

void Session::recordSentinel(std::vector<SentinelRecord> findings) {
  if (!active() || findings.empty()) return;
  for (SentinelRecord& f : findings) {
    f.rank = rank();
    sawNonFinite(f.step);
  }
  if (store::StoreWriter* w = writer()) w->appendSentinel(std::move(findings));
}

void Session::recordModuleChecks(std::vector<ModuleCheckRecord> checks) {
  if (!active() || checks.empty()) return;
  for (ModuleCheckRecord& m : checks) m.rank = rank();
  if (store::StoreWriter* w = writer()) w->appendModuleChecks(std::move(checks));
}

void Session::recordCollectives(std::vector<CollectiveRecord> collectives) {
  if (!active() || collectives.empty()) return;
  for (CollectiveRecord& c : collectives) c.rank = env_.rank;
  if (store::StoreWriter* w = writer()) w->appendCollectives(std::move(collectives));
}

void Session::recordReplicaDigests(std::vector<ReplicaDigestRecord> digests) {
  if (!active() || digests.empty()) return;
  for (ReplicaDigestRecord& d : digests) d.rank = rank();
  if (store::StoreWriter* w = writer()) w->appendReplicaDigests(std::move(digests));
}

void Session::setMeta(const std::string& key, const std::string& value) {
  if (!active()) return;
  if (store::StoreWriter* w = open_writer_.load(std::memory_order_acquire)) return w->setMeta(key, value);
  std::lock_guard<std::mutex> lock(writer_mu_);
  if (writer_) writer_->setMeta(key, value);
  else if (!writer_failed_) pending_meta_[key] = value;  // into the store's first meta when it is made
}

void Session::setCounters(const RunCounters& counters) {
  if (!active()) return;
  if (store::StoreWriter* w = open_writer_.load(std::memory_order_acquire)) return w->setCounters(counters);
  std::lock_guard<std::mutex> lock(writer_mu_);
  if (writer_) writer_->setCounters(counters);
  else if (!writer_failed_) pending_counters_.update(counters);  // into the store as it is made
}

void Session::stepEnded(int64_t optimizer_steps) {
  if (!active()) return;
  // A process that trained a step with no process group has none: its guess is its rank.
  if (rank_source_.load(std::memory_order_relaxed) == RankSource::kGuess && !inWorker()) settleRank();
  if (!identity_.stepEnded(optimizer_steps)) return;
  stepBegan(identity_.step());
}

void Session::stepBegan(int64_t step) {
  if (!active()) return;
  countUnseenBackwards();
  if (FlushHook hook = flush_hook_.load()) hook(false);
  writeCounters();
  // A step opens the store if nothing did before: a run whose attention nanprov never checked
  // still trained its steps, and the report counts every one (issue 61). A launcher, which trains
  // nothing, never steps and still leaves no store.
  if (store::StoreWriter* w = writer()) w->stepEnded(step - 1, wallClockNs());
}

void Session::countUnseenBackwards() {
  if (int64_t unseen = identity_.takeUnseenCompiledBackwards()) {
    countUnprobed("attention backward of a torch.compile'd graph that called no attention op", unseen);
  }
}

namespace {
thread_local int64_t t_unprobed_counted = 0;
}

int64_t Session::unprobedCountedOnThread() { return t_unprobed_counted; }

void Session::countUnprobed(const std::string& what, int64_t n) {
  ++t_unprobed_counted;
  if (inWorker()) return countWorkerCall(n);  // a worker's attention, whatever kind: it has no store
  int64_t step = identity_.step();
  std::lock_guard<std::mutex> lock(unprobed_mu_);
  unprobed_[what] += n;
  unprobed_first_step_.emplace(what, step);
  unprobed_dirty_ = true;
}

// Only what changed, and only once there is something: a process that saw no attention at all
// (a torchrun launcher) leaves no store behind.
void Session::writeCounters() {
  RunCounters counters;
  {
    std::lock_guard<std::mutex> lock(unprobed_mu_);
    if (!unprobed_dirty_) return;
    unprobed_dirty_ = false;
    counters.unprobed = unprobed_;
    counters.unprobed_first_step = unprobed_first_step_;
  }
  // Unchecked attention is worth a store of its own: without one the report would say nothing ran.
  if (store::StoreWriter* w = writer()) w->setCounters(counters);
}

void Session::finalize(bool collect) {
  closing_.store(true, std::memory_order_release);
  // The hook still records (the session is active): pending checks and kernels reach the store.
  // A forked child skips it: it owns neither the GPU work nor the writer.
  const bool owner = active() && getpid() == owner_pid_;
  if (owner && collect) {
    if (FlushHook hook = flush_hook_.exchange(nullptr)) hook(true);
    identity_.runEnded();
    countUnseenBackwards();
  }
  if (owner && !inWorker()) settleRank();  // a process with no group is its guess: rank 0 of 1 alone
  if (owner) writeCounters();
  State expected = State::kActive;
  if (!state_.compare_exchange_strong(expected, State::kFinalized)) return;
  // Closed, not freed: a thread that took the writer a moment ago may still append (and be
  // dropped); the Session frees it.
  store::StoreWriter* writer;
  {
    std::lock_guard<std::mutex> lock(writer_mu_);
    writer = writer_.get();
  }
  if (!writer) return;
  // In a forked child the writer thread does not exist: closing would join a thread that is not
  // there. Leak the handle; the parent owns the file.
  if (getpid() != owner_pid_) {
    (void)writer_.release();
    open_writer_.store(nullptr);
    return;
  }
  Status st = writer->close();
  if (!st.ok()) logOnce("close", "store closed with an error: " + st.message());
  // Closed, the store is one self-contained file: it takes its rank's name for good. One whose
  // writes failed keeps its process's name, which its WAL and its failure record go by (a full
  // disk may have kept the WAL from folding back); the rank's link still leads to it.
  std::lock_guard<std::mutex> lock(writer_mu_);
  if (!writer->writeFailure()) {
    store_link_.adopt();
    tally_link_.adopt();  // the tally goes by the store's name (store/run_dir.h callTallyPathOf)
  }
}

std::string Session::modulePath() const {
  ModuleResolver resolve = module_resolver_.load();
  if (!resolve) return "";
  char buffer[1024];
  int n = resolve(buffer, sizeof buffer);
  return n > 0 && static_cast<size_t>(n) < sizeof buffer ? std::string(buffer, static_cast<size_t>(n)) : "";
}

}  // namespace nanprov::probes
