#include "probes/core/probe_cost.h"

#include <array>
#include <atomic>
#include <cstdio>

namespace nanprov {
namespace {

constexpr size_t kStages = static_cast<size_t>(ProbeStage::kCount);
// One more slot than stages: kTheOp's, where the op's own time goes and is never read.
std::array<std::atomic<int64_t>, kStages + 1> g_ns{};
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

ProbeCost::Scope::Scope(ProbeStage stage) : stage_(stage), start_(std::chrono::steady_clock::now()), outer_(t_innermost) {
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
  g_ns[static_cast<size_t>(stage)].fetch_add(ns, std::memory_order_relaxed);
}

void ProbeCost::countCall() { g_calls.fetch_add(1, std::memory_order_relaxed); }

void ProbeCost::markSteady() {
  int64_t unset = -1;
  const int64_t calls = g_calls.load(std::memory_order_relaxed);
  if (!g_calls_at_steady.compare_exchange_strong(unset, calls)) return;
  for (size_t s = 0; s < kStages; ++s) g_ns_at_steady[s].store(g_ns[s].load(std::memory_order_relaxed));
}

int64_t ProbeCost::total(ProbeStage stage) { return g_ns[static_cast<size_t>(stage)].load(std::memory_order_relaxed); }

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
    out += std::string(out.empty() ? "" : ", ") + ProbeCost::stageName(static_cast<ProbeStage>(s)) + " " + millis(ns[s]);
  }
  char per_call[48] = "";
  if (calls > 0) std::snprintf(per_call, sizeof per_call, " (%.1f us per call)", static_cast<double>(all) / 1e3 / calls);
  return out + " over " + std::to_string(calls) + " calls" + per_call;
}

}  // namespace

std::string ProbeCost::summary() {
  std::array<int64_t, kStages> ns{}, steady{};
  for (size_t s = 0; s < kStages; ++s) {
    ns[s] = g_ns[s].load(std::memory_order_relaxed);
    steady[s] = ns[s] - g_ns_at_steady[s].load(std::memory_order_relaxed);
  }
  const int64_t calls = g_calls.load(std::memory_order_relaxed), at_steady = g_calls_at_steady.load();
  std::string out = costLine(ns, calls);
  if (at_steady >= 0) out += "; after the trace window: " + costLine(steady, calls - at_steady);
  return out;
}

}  // namespace nanprov
