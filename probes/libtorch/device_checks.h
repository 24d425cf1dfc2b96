// DeviceChecks: the health checks of CUDA calls, asynchronous. Each call's tensors are measured
// by one fused kernel on the call's own stream, right after the op; the record reaches the store
// once the results are back, collected without waiting at later calls and step boundaries.
// Tensors are held until their results are known, within a byte budget (NANPROV_HOLD_BYTES);
// beyond it they are released early and the caching allocator is told the check still reads
// them, so their memory is not reused under it.
#pragma once

#include <cstdint>

#include "probes/libtorch/call_capture.h"
#include "probes/libtorch/tensor_health.h"
#include "base/records/call_record.h"

namespace nanprov {

class DeviceChecks {
 public:
  static DeviceChecks& get();

  // Checks `tensors` (all on one CUDA device) and records `rec` with their health once known,
  // offering it for capture with `args` (recordCheckedCall). What the fused kernel cannot read
  // (float64, more than 6 dims) is measured synchronously, and counted as a host synchronisation.
  void submit(CallRecord rec, const RoleTensors& tensors, const CallArgs& args);

  void poll();   // records every finished check; never waits
  void drain();  // waits for every check in flight (exit only)

  int64_t hostSyncs() const;  // synchronisations nanprov added (fallbacks, full queues)
  int64_t checksInFlight() const;

 private:
  DeviceChecks() = default;
};

}  // namespace nanprov
