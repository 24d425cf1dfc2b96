// nanprov's own time on the training threads, by stage: what a probe costs the user, measured in
// the run itself (a steady-clock read at each stage boundary, tens of nanoseconds). Kept in the
// store's meta as probe_cost (a line a person reads) and probe_ns:<stage> (integers for scripts).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace nanprov {

enum class ProbeStage : int {
  kNaming = 0,   // naming a call: its module path (a Python callback), step, layer and call
  kTracing,      // entering and leaving the call's kernel-trace range
  kChecking,     // describing its tensors and enqueueing the fused check (or measuring on the host)
  kCollecting,   // step boundaries: checks collected, kernels and gradient sentinel polled
  kCount
};

class ProbeCost {
 public:
  // Adds the time since construction to `stage` when it ends.
  class Scope {
   public:
    explicit Scope(ProbeStage stage) : stage_(stage), start_(std::chrono::steady_clock::now()) {}
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    ProbeStage stage_;
    std::chrono::steady_clock::time_point start_;
  };

  static void add(ProbeStage stage, int64_t ns);
  static void countCall();
  static int64_t total(ProbeStage stage);
  // "naming 1.2 ms, tracing 0.1 ms, checking 3.4 ms, collecting 0.5 ms over 240 calls (21 µs per call)"
  static std::string summary();
  static const char* stageName(ProbeStage stage);
};

}  // namespace nanprov
