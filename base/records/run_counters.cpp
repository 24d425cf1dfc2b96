#include "base/records/run_counters.h"

namespace nanprov {
namespace {

template <typename T>
void take(std::optional<T>& field, const std::optional<T>& later) {
  if (later) field = later;
}

template <typename T>
void take(std::map<std::string, T>& field, const std::map<std::string, T>& later) {
  for (const auto& [key, value] : later) field[key] = value;
}

// Each field named, once: take(this's, later's).
template <auto... fields>
void takeEach(RunCounters& into, const RunCounters& later) {
  (take(into.*fields, later.*fields), ...);
}

}  // namespace

void RunCounters::update(const RunCounters& later) {
  using C = RunCounters;
  takeEach<&C::calls_written, &C::dropped_rows, &C::store_budget, &C::summarised, &C::step_unit, &C::host_syncs,
           &C::collectives_checked, &C::backward_inherited, &C::kernels_attributed, &C::cupti_records,
           &C::cupti_dropped_records, &C::deferred_checks, &C::measure_launches, &C::released_tensors,
           &C::capture_host_copies, &C::audit_rotation, &C::sentinel_nonfinite_grads, &C::sentinel_nonfinite_params,
           &C::unprobed, &C::unprobed_first_step, &C::probe_ns, &C::audit_regimes, &C::probe_cost, &C::kernel_tracer,
           &C::mesh, &C::module_class>(*this, later);
  trail = trail || later.trail;
  trail_compiled = trail_compiled || later.trail_compiled;
  cupti_detached = cupti_detached || later.cupti_detached;
  if (later.trail_compiled_backward != CompiledBackward::kNotCompiled)
    trail_compiled_backward = later.trail_compiled_backward;
}

}  // namespace nanprov
