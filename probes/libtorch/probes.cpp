#include "probes/libtorch/probes.h"

#include <chrono>
#include <string>
#include <vector>

#include "base/env.h"
#include "base/log_once.h"
#include "base/records/device_identity.h"
#include "probes/core/probe_cost.h"
#include "probes/libtorch/probe_thread.h"

namespace nanprov::probes {
namespace {

// Kernels are traced during the first NANPROV_TRACE_STEPS steps (0: always). CUPTI costs every
// kernel launch of the process, so after the window it is switched off; later calls are matched
// to a traced call of the same layer, op and shapes when reported.
int64_t traceSteps() {
  static const int64_t steps = envInteger("NANPROV_TRACE_STEPS", 2, 0);
  return steps;
}

void flushProbes(bool at_exit) { processProbes().flush(at_exit); }

// How stale the store's probe_cost (and the other counters written with it) may be while the run
// goes on: a second of cost figures is nothing to lose when a job dies. A normal exit's flush
// writes the final ones; a SIGTERM or a C exit() skips that flush and keeps the last written.
constexpr std::chrono::nanoseconds kCostEvery = std::chrono::seconds(1);

}  // namespace

Probes::Probes()
    : tracer_(KernelTracer::create()),
      checks_(session_, *tracer_, recorder_),
      captures_(session_),
      sentinel_(session_, checks_.measured()),
      recorder_(session_, *tracer_, module_paths_, checks_, captures_),
      trail_(session_, checks_.measured()),
      collectives_(session_, checks_.measured()) {
  session_.setFlushHook(&flushProbes);
}

Probes& processProbes() {
  static Probes* instance = new Probes();  // never destroyed: see probes.h
  return *instance;
}

void Probes::flush(bool at_exit) {
  // Marked before this flush's own timing starts, so none of the tear-down's flush is in it.
  if (steady_from_next_flush_ && !at_exit) ProbeCost::markSteady();
  ProbeCost::Scope cost(ProbeStage::kFlushing);
  try {
    {
      ProbeCost::Scope collecting(ProbeStage::kCollecting);
      if (at_exit) checks_.drain();
      else checks_.poll();
      sentinel_.collectDigests(at_exit);
    }
    if (!at_exit) {
      endStepOnThread(session_);  // brackets left open, softmax attention half seen
    }
    std::vector<KernelRecord> kernels = tracer_->collect(at_exit);
    captures_.release(kernels, at_exit);  // after the checks: their captures need these names
    session_.recordKernels(std::move(kernels));
    const bool window_over = traceSteps() > 0 && session_.identity().step() >= traceSteps();
    if (!at_exit && window_over) {
      tracer_->pause("kernel tracing covered the first " + std::to_string(traceSteps()) +
                     " steps (nanprov run --trace-steps); this call ran later");
    }
    describeEnvironment();
    const TracerStats stats = tracer_->stats();
    // The steady state begins once CUPTI's tear-down is over too: its forced flush and detach come
    // two step boundaries after the pause, and cost milliseconds once (on the H200 they fell
    // inside the launch-bound model's 19 us a call of steady "flushing"). It begins at the next
    // flush, as the detach happens at some thread's next CUDA call. Without CUPTI (the CPU,
    // --no-kernels) right after the window; where it cannot detach, three steps later.
    const bool torn_down = stats.detached || !stats.started;
    if (window_over && (torn_down || session_.identity().step() >= traceSteps() + 3)) steady_from_next_flush_ = true;
    writeCounters(stats, at_exit);
    if (std::string why = tracer_->unattributedReason(); !why.empty()) session_.setCounters({.kernel_tracer = why});
  } catch (const std::exception& e) {
    logOnce("flush", std::string("flushing device work failed: ") + e.what());
  }
}

void Probes::writeCounters(const TracerStats& stats, bool at_exit) {
  RunCounters c;
  c.host_syncs = checks_.hostSyncs();
  if (const int64_t n = collectives_.checked(); n > 0) c.collectives_checked = n;
  if (const int64_t n = checks_.inherited(); n > 0) c.backward_inherited = n;
  c.step_unit = session_.identity().stepUnit();
  c.kernels_attributed = stats.attributed_kernels;
  c.cupti_dropped_records = stats.dropped_records;
  c.cupti_records =
      CuptiRecords{.kernel = stats.kernel_records, .external_id = stats.external_id_records, .api = stats.api_records};
  c.cupti_detached = stats.detached;
  const int64_t now =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count();  // never steps back
  if (at_exit || cost_written_ns_ == 0 || now - cost_written_ns_ >= kCostEvery.count()) {
    cost_written_ns_ = now;
    c.probe_cost = ProbeCost::summary();
    if (const int64_t released = checks_.released(); released > 0) {
      c.released_tensors = ReleasedTensors{.released = released, .storages = checks_.releasedLast()};
    }
    // Deferred checks (device_checks.h), for the benchmark's note: how many calls waited for a
    // batched launch, how many launches checked them, and how many went back to immediate checks.
    DeferredChecks& deferred = c.deferred_checks.emplace();
    if (checks_.deferMode() > 0) {
      const DeferStats d = checks_.deferStats();
      deferred = {.mode = checks_.deferMode() == 2 ? DeferMode::kCudaAndCpu : DeferMode::kCuda,
                  .deferred = d.deferred,
                  .batched_launches = d.batched_launches,
                  .modified = d.modified,
                  .immediate_fallbacks = d.immediate_fallbacks};
    }
    if (const int64_t dense = checks_.denseLaunches(), fused = checks_.measuredFusedLaunches(); dense + fused > 0) {
      c.measure_launches = MeasureLaunches{.dense = dense, .fused = fused};
    }
    for (int s = 0; s < static_cast<int>(ProbeStage::kCount); ++s) {
      const auto stage = static_cast<ProbeStage>(s);
      c.probe_ns[ProbeCost::stageName(stage)] = ProbeCost::total(stage);
    }
  }
  // The store's writer writes only what changed since it last wrote.
  session_.setCounters(c);
}

void Probes::describeEnvironment() {
  const int device = checks_.firstDevice();
  if (device == described_device_) return;
  const Device described = Device::fromIndex(device);
  for (const auto& [key, value] : environmentOf(described)) session_.setMeta(key, value);
  // Which device the GPU keys describe: the report names them beside an edge only for that one.
  session_.setMeta(kMetaDescribedDevice, described.name());
  described_device_ = device;
}

}  // namespace nanprov::probes
