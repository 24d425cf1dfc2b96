// RunCounters: what a rank's probes and its store writer counted and noted about the run as a
// whole (host syncs, CUPTI's records, the audit's rotation, the trail on compiled code, the budget's
// summaries, ...), in plain types. The store keeps them as meta rows; store/run_counters_meta.h
// alone spells them out as keys and value texts, and alone reads them back, so nothing else names
// a key or parses a value. The rank's identity (rank, host, world size) and the environment
// (torch, CUDA, GPU) stay the meta's text, beside these.
//
// A field left empty was not said: its row is absent, as a run that never said it has none (a CPU
// run has no CUPTI counts). A component fills the fields it knows and hands the record to the
// session; update() merges it into what was said before.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "base/records/call_record.h"

namespace nanprov {

// CUPTI's activity records the tracer received, by kind.
struct CuptiRecords {
  int64_t kernel = 0, external_id = 0, api = 0;
  bool operator==(const CuptiRecords&) const = default;
};

// The storages that releasing held tensors freed (the caching allocator's frees moved from autograd).
struct ReleasedTensors {
  int64_t released = 0, storages = 0;
  bool operator==(const ReleasedTensors&) const = default;
};

// Which calls' checks wait for a batched launch (NANPROV_DEFER_CHECKS; device_checks.h).
enum class DeferMode { kOff, kCuda, kCudaAndCpu };

struct DeferredChecks {
  DeferMode mode = DeferMode::kOff;
  // Calls deferred, launches that checked them, calls modified before their check, and calls
  // checked at once after their signature fell back. Not written when off.
  int64_t deferred = 0, batched_launches = 0, modified = 0, immediate_fallbacks = 0;
  bool operator==(const DeferredChecks&) const = default;
};

// The sentinel's and the trail's launches on CUDA: dense checks (64 tensors each), fused (12).
struct MeasureLaunches {
  int64_t dense = 0, fused = 0;
  bool operator==(const MeasureLaunches&) const = default;
};

// --audit: steps whose rotation ran, steps its budget held it back, and calls judged again
// because their conditions left the regime they were judged in (probes/core/condition_regime.h).
struct AuditRotation {
  int64_t rotations = 0, held_back = 0;
  int64_t regime_changes = 0;
  bool operator==(const AuditRotation&) const = default;
};

// --audit: a regime of conditions one audit key met (its call signature, layer and phase;
// probes/core/condition_regime.h): when it was first and last seen, how many calls ran in it, and
// the step it was last taken to be judged (-1: never). What was not judged is the report's to say.
struct AuditRegime {
  int64_t layer = 0;
  Phase phase = Phase::kForward;
  int64_t first_seen = 0, last_seen = 0, calls = 0;
  int64_t last_judged = -1;
  std::string conditions;  // in words (regimeText)
  bool operator==(const AuditRegime&) const = default;
};

// The modules' backward of torch.compile'd code: not compiled (no row), checked in every backward
// graph, or unchecked once one graph could not be (one forward graph run for several places).
enum class CompiledBackward { kNotCompiled, kChecked, kUnchecked };

// The store budget's running totals (store/budget_keeper.h): calls folded into step_summaries,
// how many of those were not clean, and how many steps one summary row stands for at most.
struct BudgetSummaries {
  int64_t calls = 0, not_clean = 0, every = 1;
  int64_t steps_thinned = 0;  // rows of the steps table the summaries' thinning took (their count stays)
  bool operator==(const BudgetSummaries&) const = default;
};

struct RunCounters {
  // The store writer's own.
  std::optional<int64_t> calls_written;  // calls committed, a running count
  std::optional<int64_t> dropped_rows;   // rows the writer failed to write, at close
  std::optional<int64_t> store_budget;   // bytes (nanprov run --store-budget)
  std::optional<BudgetSummaries> summarised;

  // The probes'.
  std::optional<StepUnit> step_unit;
  bool trail = false;           // ran with --trail
  bool trail_compiled = false;  // a torch.compile'd graph ran under the trail
  CompiledBackward trail_compiled_backward = CompiledBackward::kNotCompiled;
  std::optional<int64_t> host_syncs;  // synchronisations nanprov added (CUDA)
  std::optional<int64_t> collectives_checked;
  // Tensors a backward passed unchanged from its forward, whose counts it took from the forward's
  // check instead of reading them again (probes/libtorch/forward_checks.h).
  std::optional<int64_t> backward_inherited;
  std::optional<int64_t> kernels_attributed;
  std::optional<CuptiRecords> cupti_records;
  std::optional<int64_t> cupti_dropped_records;
  bool cupti_detached = false;
  std::optional<DeferredChecks> deferred_checks;
  std::optional<MeasureLaunches> measure_launches;
  std::optional<ReleasedTensors> released_tensors;
  std::optional<int64_t> capture_host_copies;
  std::optional<AuditRotation> audit_rotation;
  std::optional<int64_t> sentinel_nonfinite_grads, sentinel_nonfinite_params;
  // Attention recognised but not checked, by what it was: the count, and the step it was first
  // seen in. What is open-ended (an op's name, a module class's words), so these are maps.
  std::map<std::string, int64_t> unprobed, unprobed_first_step;
  std::map<std::string, int64_t> probe_ns;  // the probes' time by stage (ProbeCost's stage names)
  // --audit's regimes by "k<key>.r<slot>": a key's slot is kept for its life, so a row is rewritten in place.
  std::map<std::string, AuditRegime> audit_regimes;

  // Text by nature, kept as text: nothing reads a number out of them.
  std::optional<std::string> probe_cost;     // ProbeCost's summary as printed; probe_ns has its numbers
  std::optional<std::string> kernel_tracer;  // why CUPTI could not be used, in the tracer's words
  std::optional<std::string> mesh;           // a DeviceMesh rank's coordinates as the mesh names them ("dp=0,tp=1")
  std::map<std::string, std::string> module_class;  // the trail's module pattern → its attention-like class

  // Every field `later` says replaces this one's (the maps' entries by key; a flag once said stays).
  void update(const RunCounters& later);

  bool operator==(const RunCounters&) const = default;
};

}  // namespace nanprov
