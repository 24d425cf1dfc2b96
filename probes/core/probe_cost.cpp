#include "probes/core/probe_cost.h"

#include <array>
#include <atomic>
#include <cstdio>

namespace nanprov::probes {
namespace {

constexpr size_t kStages = static_cast<size_t>(ProbeStage::kCount);

// Each thread adds to its own totals, read by summing every thread's: a shared counter written
// by the training thread and autograd's at every stage boundary moved its cache line between
// cores each time. Only the owning thread writes a thread's totals (a relaxed load and store,
// no locked instruction); a thread's block outlives it, so its time stays counted.
struct ThreadTotals {
  // One more slot than stages: kTheOp's, where the op's own time goes and is never read.
  std::array<std::atomic<int64_t>, kStages + 1> ns{};
  ThreadTotals* next = nullptr;
};
std::atomic<ThreadTotals*> g_threads{nullptr};

ThreadTotals& threadTotals() {
  thread_local ThreadTotals* mine = [] {
    auto* t = new ThreadTotals();  // leaked on purpose: read after the thread ended
    t->next = g_threads.load(std::memory_order_relaxed);
    while (!g_threads.compare_exchange_weak(t->next, t, std::memory_order_release, std::memory_order_relaxed)) {
    }
    return t;
  }();
  return *mine;
}

std::array<int64_t, kStages> totals() {
  std::array<int64_t, kStages> sum{};
  for (ThreadTotals* t = g_threads.load(std::memory_order_acquire); t; t = t->next) {
    for (size_t s = 0; s < kStages; ++s) sum[s] += t->ns[s].load(std::memory_order_relaxed);
  }
  return sum;
}

std::atomic<int64_t> g_calls{0};
// The totals when the steady state began; calls_at_steady < 0 until then.
std::array<std::atomic<int64_t>, kStages> g_ns_at_steady{};
std::atomic<int64_t> g_calls_at_steady{-1};
thread_local ProbeCost::Scope* t_innermost = nullptr;

int64_t nanosBetween(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count();
}

std::string millis(int64_t ns) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f ms", static_cast<double>(ns) / 1e6);
  return text;
}

}  // namespace

ProbeCost::Scope::Scope(ProbeStage stage)
    : stage_(stage), start_(std::chrono::steady_clock::now()), outer_(t_innermost) {
  if (outer_) add(outer_->stage_, nanosBetween(outer_->start_, start_));
  t_innermost = this;
}

ProbeCost::Scope::~Scope() {
  const auto now = std::chrono::steady_clock::now();
  add(stage_, nanosBetween(start_, now));
  t_innermost = outer_;
  if (outer_) outer_->start_ = now;  // the outer stage resumes
}

void ProbeCost::add(ProbeStage stage, int64_t ns) {
  std::atomic<int64_t>& total = threadTotals().ns[static_cast<size_t>(stage)];
  total.store(total.load(std::memory_order_relaxed) + ns, std::memory_order_relaxed);
}

void ProbeCost::countCall() { g_calls.fetch_add(1, std::memory_order_relaxed); }

void ProbeCost::markSteady() {
  int64_t unset = -1;
  const int64_t calls = g_calls.load(std::memory_order_relaxed);
  if (!g_calls_at_steady.compare_exchange_strong(unset, calls)) return;
  const std::array<int64_t, kStages> now = totals();
  for (size_t s = 0; s < kStages; ++s) g_ns_at_steady[s].store(now[s]);
}

int64_t ProbeCost::total(ProbeStage stage) {
  return stage == ProbeStage::kTheOp ? 0 : totals()[static_cast<size_t>(stage)];
}

const char* ProbeCost::stageName(ProbeStage stage) {
  switch (stage) {
    case ProbeStage::kDispatching: return "dispatching";
    case ProbeStage::kNaming: return "naming";
    case ProbeStage::kTracing: return "tracing";
    case ProbeStage::kDescribing: return "describing";
    case ProbeStage::kSubmitting: return "submitting";
    case ProbeStage::kLaunching: return "launching";
    case ProbeStage::kRecording: return "recording";
    case ProbeStage::kCollecting: return "collecting";
    case ProbeStage::kReleasing: return "releasing";
    case ProbeStage::kSentinel: return "sentinel";
    case ProbeStage::kCollectives: return "collectives";
    case ProbeStage::kTrail: return "trail";
    case ProbeStage::kFlushing: return "flushing";
    case ProbeStage::kCount: break;
  }
  return "?";
}

namespace {

std::string costLine(const std::array<int64_t, kStages>& ns, int64_t calls) {
  std::string out;
  int64_t all = 0;
  for (size_t s = 0; s < kStages; ++s) {
    all += ns[s];
    out +=
        std::string(out.empty() ? "" : ", ") + ProbeCost::stageName(static_cast<ProbeStage>(s)) + " " + millis(ns[s]);
  }
  char per_call[48] = "";
  if (calls > 0)
    std::snprintf(per_call, sizeof per_call, " (%.1f us per call)", static_cast<double>(all) / 1e3 / calls);
  return out + " over " + std::to_string(calls) + " calls" + per_call;
}

}  // namespace

std::string ProbeCost::summary() {
  const std::array<int64_t, kStages> ns = totals();
  std::array<int64_t, kStages> steady{};
  for (size_t s = 0; s < kStages; ++s) steady[s] = ns[s] - g_ns_at_steady[s].load(std::memory_order_relaxed);
  const int64_t calls = g_calls.load(std::memory_order_relaxed), at_steady = g_calls_at_steady.load();
  std::string out = costLine(ns, calls);
  if (at_steady >= 0) out += "; after the trace window: " + costLine(steady, calls - at_steady);
  return out;
}

}  // namespace nanprov::probes
