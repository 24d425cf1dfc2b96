// Probes: everything nanprov runs inside one training process, owned in one place. The session
// (the store, call names, the capture policy), the kernel tracer, the device checks, the captures
// and their writer thread, the gradient sentinel, the module path cache, the call recorder (how a
// probed call becomes a record), the module trail (--trail) and the collectives' checks are
// members, built in dependency order and handed what they use, and flush() is where the order of
// a step boundary and of exit is written.
//
// processProbes() is the process's one instance, made on first use and never destroyed: the dispatcher's
// kernels, CUPTI's callbacks and exit hooks may still reach it while static destructors run. Only
// entry points call it: the kernels the dispatcher runs, the ops the bootstrap calls, the C ABI
// (entry.cpp), and the hooks and callbacks those registered. Everything else is handed its part
// (tests/CMakeLists.txt: Layering.OnlyEntryPointsFindTheProbes).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "probes/core/session.h"
#include "probes/libtorch/call_capture.h"
#include "probes/libtorch/call_recorder.h"
#include "probes/libtorch/collective_checks.h"
#include "probes/libtorch/device_checks.h"
#include "probes/libtorch/gradient_sentinel.h"
#include "probes/libtorch/module_path_cache.h"
#include "probes/libtorch/module_trail.h"
#include "tracer/kernel_tracer.h"

namespace nanprov::probes {

class Probes {
 public:
  Probes();
  Probes(const Probes&) = delete;
  Probes& operator=(const Probes&) = delete;

  // What the entry points reach; the tracer, the captures and the module path cache are the
  // recorder's and the checks' alone.
  Session& session() { return session_; }
  DeviceChecks& checks() { return checks_; }
  GradientSentinel& sentinel() { return sentinel_; }
  CallRecorder& recorder() { return recorder_; }
  ModuleTrail& trail() { return trail_; }
  CollectiveChecks& collectives() { return collectives_; }

  // At every step boundary and at exit (the session's flush hook): completes the checks, which
  // records their calls and the sentinel's findings; stores the kernels traced so far; hands the
  // captures waiting for those kernels' names to the writer (at exit: waits for the files); closes
  // the trace window; writes the run's counters to the store's meta.
  void flush(bool at_exit);

 private:
  // The environment (environmentOf) into the store's meta: once with the torch version, once
  // more when checks first ran on a GPU, whose runtime is then up, so asking it starts nothing.
  void describeEnvironment();
  // The run's counters (base/records/run_counters.h) to the store, which writes a value only when
  // it changed. Those that change every step (the probe cost and its stages, released tensors,
  // deferred checks, measure launches) at most every kCostEvery and at a normal exit: said every
  // step, with the summary formatted each time, they were most of a step boundary's cost (2 us a
  // call on the H200's launch-bound model, 8 on the CPU demo).
  void writeCounters(const TracerStats& stats, bool at_exit);

  Session session_;  // first: every other member records through it
  std::unique_ptr<KernelTracer> tracer_;
  DeviceChecks checks_;  // hands its checked calls to recorder_, built below: it checks none before
  Captures captures_;
  GradientSentinel sentinel_;
  ModulePathCache module_paths_;
  CallRecorder recorder_;
  ModuleTrail trail_;
  CollectiveChecks collectives_;
  int described_device_ = -2;            // the device describeEnvironment last wrote; -2: nothing written yet
  bool steady_from_next_flush_ = false;  // the probes' steady state begins at the next flush
  int64_t cost_written_ns_ = 0;          // when the probe cost was last said (steady clock)
};

Probes& processProbes();

}  // namespace nanprov::probes
