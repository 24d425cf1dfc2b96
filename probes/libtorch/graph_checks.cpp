#include "probes/libtorch/graph_checks.h"

#include <thread>

#include "base/log_once.h"
#include "base/wall_clock.h"
#include "probes/core/session.h"
#include "probes/libtorch/check_views.h"
#include "probes/libtorch/checked_call_sink.h"
#include "probes/libtorch/device_queue.h"
#include "tracer/kernel_tracer.h"

namespace nanprov::probes {
namespace {

constexpr const char* kUnattributed = "it ran in a CUDA graph replay, whose kernels are not told apart per call";
constexpr const char* kNoTensors = "it ran in a CUDA graph replay: its tensors live in the graph's memory, never held";
// Replays named but not yet recorded, per graph: far more than the GPU runs behind the host. A
// graph replayed past it without its checks ever publishing (they failed) stops growing here.
constexpr size_t kMaxWaitingReplays = 4 * kernels::kGraphRingEntries;

thread_local int t_graph_pool_depth = 0;

}  // namespace

struct GraphChecks::Captured {
  std::unique_ptr<CapturedCheck> check;
  CallEvent pattern;  // the record at capture: tensors described, names and counts filled per replay
  Checked checked;
  uint64_t next = 0;  // the next replay to record
};

struct GraphChecks::Graph {
  uint64_t capture_id = 0;
  std::vector<Captured> checks;           // in capture order
  std::deque<std::vector<Name>> waiting;  // replays first_waiting + i: one name per check
  uint64_t first_waiting = 0;
};

void GraphChecks::enterGraphPool(bool entering) {
  t_graph_pool_depth = std::max(0, t_graph_pool_depth + (entering ? 1 : -1));
}

bool GraphChecks::inGraphPool() { return t_graph_pool_depth > 0; }

GraphChecks::GraphChecks(Session& session, KernelTracer& tracer, CheckedCallSink& sink)
    : session_(session), tracer_(tracer), sink_(sink) {}

GraphChecks::~GraphChecks() = default;

void GraphChecks::captureBegan(int64_t key, void* stream) {
  if (!graphChecksBuilt()) return;  // no check can be captured: the graph's attention is counted unprobed
  const uint64_t id = captureIdOf(stream);
  if (id == 0) {
    logOnce("graph capture id",
            "a CUDA graph began capturing on a stream that is not capturing: its attention "
            "cannot be checked");
    return;
  }
  // CUPTI attached at the graph's instantiation must stay: a replay after it detached faults.
  tracer_.keepAttached();
  std::lock_guard<std::mutex> lock(mu_);
  keys_[id] = key;
  Graph& graph = graphs_[key];
  // Captured again (after a reset): the old checks never run again.
  for (Captured& c : graph.checks) retired_.push_back(std::move(c.check));
  graph = Graph{};
  graph.capture_id = id;
}

std::string GraphChecks::capture(const CallEvent& rec, const Checked& checked, const kernels::TensorView* views,
                                 int count, int device, void* stream) {
  if (!graphChecksBuilt()) return "attention captured into a CUDA graph (nanprov was built without the CUDA toolkit)";
  const uint64_t id = captureIdOf(stream);
  std::lock_guard<std::mutex> lock(mu_);
  auto key = keys_.find(id);
  if (id == 0 || key == keys_.end()) {
    return "attention captured into a CUDA graph not begun by torch.cuda.CUDAGraph (its replays cannot be told)";
  }
  if (captured_ >= kMaxChecks) {
    return "attention captured into CUDA graphs past the first " + std::to_string(kMaxChecks) + " calls";
  }
  auto check = CapturedCheck::capture(device, views, count, stream);
  if (!check.ok()) {
    logOnce("graph check", "a check could not be captured into a CUDA graph: " + check.status().message());
    return "attention captured into a CUDA graph whose check could not be captured with it";
  }
  ++captured_;
  Captured captured;
  captured.check = std::move(check.value());
  captured.pattern = rec;
  captured.pattern.unattributed = kUnattributed;
  captured.checked = checked;
  graphs_[key->second].checks.push_back(std::move(captured));
  return "";
}

void GraphChecks::replayed(int64_t key) {
  Finished done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = graphs_.find(key);
    if (it == graphs_.end() || it->second.checks.empty()) return;  // a graph without attention
    Graph& graph = it->second;
    CallIdentity& ids = session_.identity();
    std::vector<Name> names;
    names.reserve(graph.checks.size());
    const int64_t now = wallClockNs();
    for (const Captured& c : graph.checks) {
      const CallEvent& p = c.pattern;
      const bool original_forward = p.phase == Phase::kForward && !p.recompute;
      int64_t fwd_seq = -1;
      if (!original_forward) {
        auto fwd = replayed_forward_.find(p.fwd_seq);
        fwd_seq = fwd != replayed_forward_.end() ? fwd->second : -1;
      }
      const CallName name = ids.replayed(p.layer, InternedText(p.module), fwd_seq, p.recompute);
      if (original_forward) replayed_forward_[p.seq] = name.seq;
      names.push_back({name.seq, name.step, name.call, name.fwd_seq, now});
    }
    session_.callBegun(static_cast<int64_t>(names.size()));
    graph.waiting.push_back(std::move(names));
    if (graph.waiting.size() > kMaxWaitingReplays) {  // its checks never publish: counted, not kept
      graph.waiting.pop_front();
      ++graph.first_waiting;
      for (Captured& c : graph.checks) {
        if (c.next < graph.first_waiting) ++done.lost;
        c.next = std::max(c.next, graph.first_waiting);
      }
    }
    collectLocked(done, false, nullptr);
  }
  recordOutsideLock(done);
}

void GraphChecks::reset(int64_t key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = graphs_.find(key);
  if (it == graphs_.end()) return;
  for (Captured& c : it->second.checks) retired_.push_back(std::move(c.check));
  keys_.erase(it->second.capture_id);
  graphs_.erase(it);
}

void GraphChecks::poll() {
  Finished done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    collectLocked(done, false, nullptr);
  }
  recordOutsideLock(done);
}

void GraphChecks::drain(Clock::time_point deadline, int* unfinished) {
  for (;;) {
    Finished done;
    bool waiting = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      const bool last_pass = Clock::now() >= deadline;
      collectLocked(done, last_pass, last_pass ? unfinished : nullptr);
      for (const auto& [key, graph] : graphs_) waiting = waiting || !graph.waiting.empty();
    }
    recordOutsideLock(done);
    if (!waiting) return;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

// Takes every published replay of every check, in replay order. With `giving_up`, replays still
// unpublished are dropped and counted in `*unfinished`.
void GraphChecks::collectLocked(Finished& done, bool giving_up, int* unfinished) {
  kernels::HealthCounts counts[kernels::kMaxTensors];
  for (auto& [key, graph] : graphs_) {
    const uint64_t named = graph.first_waiting + graph.waiting.size();
    for (Captured& c : graph.checks) {
      for (; c.next < named; ++c.next) {
        const auto state = c.check->read(c.next, counts);
        if (state == CapturedCheck::Replay::kPending) break;
        if (state == CapturedCheck::Replay::kOverwritten) {
          ++done.lost;
          continue;
        }
        const Name& name = graph.waiting[c.next - graph.first_waiting][static_cast<size_t>(&c - graph.checks.data())];
        CallEvent rec = c.pattern;
        rec.seq = name.seq;
        rec.step = name.step;
        rec.call = name.call;
        rec.fwd_seq = name.fwd_seq;
        rec.start_ns = rec.end_ns = name.at_ns;
        takeCounts(rec, c.checked, counts, c.check->count());
        done.records.push_back(std::move(rec));
      }
      if (giving_up && c.next < named) {
        if (unfinished) *unfinished += static_cast<int>(named - c.next);
        c.next = named;
      }
    }
    uint64_t oldest = named;
    for (const Captured& c : graph.checks) oldest = std::min(oldest, c.next);
    while (graph.first_waiting < oldest) {
      graph.waiting.pop_front();
      ++graph.first_waiting;
    }
  }
}

void GraphChecks::recordOutsideLock(Finished& done) {
  for (CallEvent& rec : done.records) sink_.record(std::move(rec), {}, {}, kNoTensors);
  if (done.lost > 0) {
    session_.countUnprobed("attention replayed in a CUDA graph, its check's counts overwritten before they were read",
                           done.lost);
  }
}

}  // namespace nanprov::probes
