// DeviceChecks: the health checks of CUDA calls, asynchronous. Each call's tensors are measured
// by one fused kernel on the call's own stream, right after the op; the record reaches the store
// once the results are back, collected without waiting at later calls and step boundaries.
// Tensors are held until their results are known, within a byte budget (NANPROV_HOLD_BYTES);
// beyond it they are released early and the caching allocator is told the check still reads
// them, so their memory is not reused under it. Built without the CUDA toolkit, or where a
// device's queue cannot be made, every tensor is measured on the host (a counted host sync).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "kernels/health_check.h"
#include "probes/libtorch/call_capture.h"
#include "probes/libtorch/tensor_health.h"
#include "base/inline_vector.h"
#include "base/records/call_event.h"
#include "base/records/call_record.h"

namespace c10 {
class Stream;
}

namespace nanprov {

namespace kernels {
class HealthCheckQueue;
}

class DeviceChecks {
 public:
  DeviceChecks();
  DeviceChecks(const DeviceChecks&) = delete;
  DeviceChecks& operator=(const DeviceChecks&) = delete;

  // Checks `tensors` (all on one CUDA device) and records `rec` with their health once known,
  // offering it for capture with `args` (recordCheckedCall). What the fused kernel cannot read
  // (float64, more than 6 dims) is measured synchronously, and counted as a host synchronisation.
  void submit(CallEvent rec, const RoleTensors& tensors, const CallArgs& args);

  // Tensors measured for something other than an attention call (the gradient sentinel, the
  // module trail): NaN and Inf counts and the largest finite |x|. At most kMaxMeasured tensors, all on one CUDA device, checked by the
  // same fused kernel on the device's current stream, and not held: the caller enqueues them after
  // the work that made them, so stream order keeps their memory valid until the check ran.
  // `done(context, counts, n)` runs at a later poll, on the polling thread; a check that failed
  // on the device gives n = 0. What the kernel cannot read is measured on the host at once, `done`
  // called before measure returns (a counted host synchronisation). Returns false when `done` will
  // never be called: the device's stream is capturing a CUDA graph, so nothing may touch it.
  struct Counts {
    int64_t nan = 0, posinf = 0, neginf = 0;
    double max_abs = 0;  // largest finite |x|
  };
  using Measured = void (*)(uint64_t context, const Counts* counts, int n);
  static constexpr int kMaxMeasured = 12;
  bool measure(const std::vector<at::Tensor>& tensors, Measured done, uint64_t context);

  void poll();   // records every finished check; never waits
  void drain();  // waits for every check in flight (exit only)

  int64_t hostSyncs() const;  // synchronisations nanprov added (fallbacks, full queues)
  int firstDevice() const;    // the lowest CUDA device checks ran on; -1 while none has
  int64_t checksInFlight() const;

 private:
  // A check in flight: an attention call's (recorded once its counts are known), or tensors
  // measured for the gradient sentinel (`measured` set: handed their counts, nothing recorded).
  struct Pending {
    CallEvent rec;                // tensors described; counts filled from the kernel
    InlineVector<uint8_t, kMaxCallTensors> checked;  // rec.tensors index of each kernel view
    RoleTensors held;             // released once the results are known
    int64_t held_bytes = 0;
    CallArgs args;
    Measured measured = nullptr;
    uint64_t context = 0;
  };
  static constexpr int kMaxDevices = 64;

  kernels::HealthCheckQueue* queueFor(int device);
  void collect(bool wait);
  using Views = InlineVector<kernels::TensorView, kernels::kMaxTensors>;
  // Holds `tensors` (when given and within the budget) in `pending` and launches its check.
  std::optional<Pending> enqueue(kernels::HealthCheckQueue& queue, Pending pending, const Views& views,
                                 const c10::Stream& stream, const RoleTensors* tensors = nullptr);
  void markInUse(const RoleTensors& tensors, const c10::Stream& stream);
  void complete(uint64_t token, const kernels::HealthCounts* counts, int n);
  void recordMeasuredSynchronously(CallEvent rec, const RoleTensors& tensors, const CallArgs& args);
  void measureOnHost(const std::vector<at::Tensor>& tensors, Measured done, uint64_t context);

  std::array<std::atomic<kernels::HealthCheckQueue*>, kMaxDevices> queues_{};  // leaked: checks may be in flight at exit
  std::array<bool, kMaxDevices> failed_{};
  std::mutex create_mu_;  // only around creating a queue; no other lock is taken inside it
  // Guards in_flight_, next_token_ and changes to held_bytes_. Lock order: a queue's own lock
  // before this one: HealthCheckQueue::submit/collect hold theirs while calling complete(), which
  // takes mu_. So mu_ is never held across a queue call, and it is released before a checked
  // call is recorded (the session's locks come after both).
  mutable std::mutex mu_;
  // Map nodes are recycled (extract, then insert again): a check allocates nothing in steady state.
  using InFlight = std::map<uint64_t, Pending>;
  InFlight in_flight_;
  std::vector<InFlight::node_type> free_nodes_;
  std::atomic<int64_t> submits_{0};
  uint64_t next_token_ = 1;
  std::atomic<int64_t> held_bytes_{0};  // read without the lock to decide when to poll
  std::atomic<int64_t> sync_measures_{0};
  const int64_t budget_;
};

}  // namespace nanprov
