#include "probes/probe_cost.h"

#include <array>
#include <atomic>
#include <cstdio>

namespace nanprov {
namespace {

std::array<std::atomic<int64_t>, static_cast<size_t>(ProbeStage::kCount)> g_ns{};
std::atomic<int64_t> g_calls{0};

std::string millis(int64_t ns) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f ms", static_cast<double>(ns) / 1e6);
  return text;
}

}  // namespace

ProbeCost::Scope::~Scope() {
  add(stage_, std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_).count());
}

void ProbeCost::add(ProbeStage stage, int64_t ns) {
  g_ns[static_cast<size_t>(stage)].fetch_add(ns, std::memory_order_relaxed);
}

void ProbeCost::countCall() { g_calls.fetch_add(1, std::memory_order_relaxed); }

int64_t ProbeCost::total(ProbeStage stage) { return g_ns[static_cast<size_t>(stage)].load(std::memory_order_relaxed); }

const char* ProbeCost::stageName(ProbeStage stage) {
  switch (stage) {
    case ProbeStage::kNaming: return "naming";
    case ProbeStage::kTracing: return "tracing";
    case ProbeStage::kChecking: return "checking";
    case ProbeStage::kCollecting: return "collecting";
    case ProbeStage::kCount: break;
  }
  return "?";
}

std::string ProbeCost::summary() {
  std::string out;
  int64_t all = 0;
  for (int s = 0; s < static_cast<int>(ProbeStage::kCount); ++s) {
    const auto stage = static_cast<ProbeStage>(s);
    all += total(stage);
    out += std::string(out.empty() ? "" : ", ") + stageName(stage) + " " + millis(total(stage));
  }
  const int64_t calls = g_calls.load(std::memory_order_relaxed);
  char per_call[48] = "";
  if (calls > 0) std::snprintf(per_call, sizeof per_call, " (%.1f us per call)", static_cast<double>(all) / 1e3 / calls);
  return out + " over " + std::to_string(calls) + " calls" + per_call;
}

}  // namespace nanprov
