// DeviceChecks: the health checks of CUDA calls, asynchronous. Each call's tensors are measured
// by one fused kernel on the call's own stream, right after the op; the record reaches the store
// once the results are back, collected without waiting at later calls and step boundaries.
// Tensors are held until their results are known, within a byte budget (NANPROV_HOLD_BYTES);
// beyond it they are released early and the caching allocator is told the check still reads
// them, so their memory is not reused under it.
#pragma once

#include <cstdint>
#include <vector>

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

  // Tensors measured for something other than an attention call (the gradient sentinel): NaN
  // and Inf counts only. At most kMaxMeasured tensors, all on one CUDA device, checked by the
  // same fused kernel on the device's current stream, and not held: the caller enqueues them after
  // the work that made them, so stream order keeps their memory valid until the check ran.
  // `done(context, counts, n)` runs at a later poll, on the polling thread, in submission order;
  // a check that failed on the device gives n = 0. What the kernel cannot read is measured on the
  // host at once (a counted host synchronisation).
  struct Counts {
    int64_t nan = 0, posinf = 0, neginf = 0;
  };
  using Measured = void (*)(uint64_t context, const Counts* counts, int n);
  static constexpr int kMaxMeasured = 12;
  void measure(const std::vector<at::Tensor>& tensors, Measured done, uint64_t context);

  void poll();   // records every finished check; never waits
  void drain();  // waits for every check in flight (exit only)

  int64_t hostSyncs() const;  // synchronisations nanprov added (fallbacks, full queues)
  int64_t checksInFlight() const;

 private:
  DeviceChecks() = default;
};

}  // namespace nanprov
