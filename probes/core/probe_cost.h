// nanprov's own time on the training threads, by stage: what a probe costs the user, measured in
// the run itself (a steady-clock read at each stage boundary, tens of nanoseconds). Kept in the
// store's meta as probe_cost (a line a person reads) and probe_ns:<stage> (integers for scripts).
// Every recorded call is counted; naming, tracing and describing are timed on the dispatcher
// probes (the SDPA ops), the path every benchmark takes.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace nanprov::probes {

// Stages are exclusive: a stage entered inside another pauses the outer one.
enum class ProbeStage : int {
  kDispatching = 0,  // the rest of a probed call: its arguments taken from the dispatcher's stack, its op
                     // found, its clock read (everything between entering the probe and leaving it
                     // that no stage below claims, the op itself excepted)
  kNaming,           // naming a call: its module path (a Python callback), step, layer and call
  kTracing,          // entering and leaving the call's kernel-trace range
  kDescribing,       // its outputs taken, its tensors described (or measured, on the host)
  kSubmitting,       // a CUDA call handed to its check: its stream, its lane, the kernel's views, a free slot
  kLaunching,        // the fused check launched (the CUDA runtime's and driver's time)
  kRecording,        // a checked call handed to the capture policy and the store's writer
  kCollecting,       // finished checks read and their calls completed: at step boundaries, and every few calls
  kReleasing,        // the tensors held for a finished check dropped (where the last reference goes, the
                     // caching allocator's free, which autograd would otherwise have paid)
  kSentinel,         // the gradient sentinel: every gradient and parameter handed to checks, once a step
                     // (its launches included: a per-step cost, spread over the step's calls in the summary)
  kCollectives,      // the collectives' inputs and outputs handed to checks (CPU: scanned), a few a step
  kTrail,            // --trail: module outputs and gradients handed to checks (launches included)
  kFlushing,         // step boundaries, the rest: kernels read, captures released, meta written
  kCount,
  kTheOp = kCount  // the probed op itself, inside kDispatching: pauses it, and its time is in no stage
};

class ProbeCost {
 public:
  // Adds the time since construction to `stage` when it ends.
  class Scope {
   public:
    explicit Scope(ProbeStage stage);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    ProbeStage stage_;
    std::chrono::steady_clock::time_point start_;
    Scope* outer_;
  };

  static void add(ProbeStage stage, int64_t ns);
  static void countCall();
  // From here on the summary also gives the steady state apart: called when the kernel-trace
  // window closes, whose CUPTI set-up and tear-down are one-off costs.
  static void markSteady();
  static int64_t total(ProbeStage stage);
  // "naming 1.2 ms, ... over 240 calls (21.0 us per call); steady: naming 0.8 ms, ... over 200 calls (...)"
  static std::string summary();
  static const char* stageName(ProbeStage stage);
};

}  // namespace nanprov::probes
