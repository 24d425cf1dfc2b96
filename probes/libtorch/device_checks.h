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
#include <functional>
#include <mutex>
#include <optional>
#include <vector>

#include "kernels/health_check.h"
#include "probes/libtorch/call_capture.h"
#include "probes/libtorch/graph_checks.h"
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

// Fills the counts of rec.tensors[checked[i]] from a kernel's counts[i], i < n.
void takeCounts(CallEvent& rec, const GraphChecks::Checked& checked, const kernels::HealthCounts* counts, int n);

class DeviceChecks {
 public:
  DeviceChecks();
  DeviceChecks(const DeviceChecks&) = delete;
  DeviceChecks& operator=(const DeviceChecks&) = delete;

  // Checks `tensors` (all on the CUDA device rec.device) and records `rec` with their health once known,
  // offering it for capture with `args` (recordCheckedCall). What the fused kernel cannot read
  // (float64, more than 6 dims) is measured synchronously, and counted as a host synchronisation.
  void submit(CallEvent rec, const RoleTensors& tensors, const CallArgs& args);

  // Tensors measured for something other than an attention call (the gradient sentinel, the
  // module trail): NaN and Inf counts and the largest finite |x|. All on one CUDA device, checked
  // on the device's current stream, and not held: the caller enqueues them after the work that
  // made them, so stream order keeps their memory valid until the check ran. Up to
  // kMaxMeasuredDense tensors in one dense check (kernels::launchDenseCheck) when each is dense
  // float32/float16/bfloat16 and the dense check runs on this device (denseBatch); otherwise up
  // to kMaxMeasured by the fused kernel, and more than that on the host.
  // `done(context, counts, n)` runs at a later poll, on the polling thread; a check that failed
  // on the device gives n = 0. What neither kernel can read is measured on the host at once, `done`
  // called before measure returns (a counted host synchronisation). Returns false when `done` will
  // never be called: the device's stream is capturing a CUDA graph, so nothing may touch it.
  struct Counts {
    int64_t nan = 0, posinf = 0, neginf = 0;
    double max_abs = 0;  // largest finite |x|
  };
  using Measured = void (*)(uint64_t context, const Counts* counts, int n);
  static constexpr int kMaxMeasured = 12;
  static constexpr int kMaxMeasuredDense = kernels::kMaxDense;
  // How many dense tensors one measure() on `device` from this thread takes: kMaxMeasuredDense,
  // or kMaxMeasured where dense checks cannot run there (batch by this to stay on the device).
  int denseBatch(int device);
  // True when `t` can go in a dense check: a dense CUDA tensor the kernel reads.
  static bool denseCheckable(const at::Tensor& t);
  bool measure(const std::vector<at::Tensor>& tensors, Measured done, uint64_t context);

  void poll();   // records every finished check; never waits for the GPU (it may wait its turn behind another collector)
  // Waits for every check in flight (exit only), at most NANPROV_EXIT_WAIT_SECONDS (30): what is
  // unfinished then is dropped, and said.
  void drain();

  int64_t hostSyncs() const;  // synchronisations nanprov added (fallbacks, full queues)
  // measure()'s launches so far: dense checks, and fused checks of measured tensors.
  int64_t denseLaunches() const { return dense_launches_.load(std::memory_order_relaxed); }
  int64_t measuredFusedLaunches() const { return measured_fused_launches_.load(std::memory_order_relaxed); }
  // Held tensors released so far, and how many storages their release freed: the caching
  // allocator's frees, which autograd would have made without nanprov.
  int64_t released() const { return released_.load(std::memory_order_relaxed); }
  int64_t releasedLast() const { return released_last_.load(std::memory_order_relaxed); }
  int firstDevice() const;    // the lowest CUDA device checks ran on; -1 while none has
  // Checks captured into CUDA graphs, recorded at each replay (collected by poll() and drain()).
  GraphChecks& graphs() { return graphs_; }
  // The bootstrap: graph `key` began capturing on the current stream of the current CUDA device.
  void graphCaptureBegan(int64_t key);

  static constexpr int kMaxDevices = 64;

 private:
  // A check in flight: an attention call's (recorded once its counts are known), or tensors
  // measured for the gradient sentinel (`measured` set: handed their counts, nothing recorded).
  struct Pending {
    CallEvent rec;                // tensors described; counts filled from the kernel
    GraphChecks::Checked checked;  // rec.tensors index of each kernel view
    RoleTensors held;             // released once the results are known
    int64_t held_bytes = 0;
    CallArgs args;
    const char* missing = nullptr;  // why `held` is empty, when it is not the hold budget
    Measured measured = nullptr;
    uint64_t context = 0;
  };
  // A dense check in flight: whom to hand its counts.
  struct Measuring {
    Measured done = nullptr;
    uint64_t context = 0;
  };
  // The checks one thread enqueued on one device: its queue, and the Pending of each of the
  // queue's slots. Only that thread submits, so submitting takes no lock; any thread collects.
  // Lanes are never freed (checks may be in flight at exit); a thread's lane is adopted by the
  // next new thread once it ended.
  struct Lane;
  static constexpr int kMaxLanes = 256;

  template <typename Fn>
  void forEachLane(Fn&& fn) const;  // every lane made so far, in the order they were made
  Lane* laneFor(int device);
  Lane* adoptLane(int device);
  void collect(bool patient);  // every lane's finished checks, never waiting for the GPU
  void collectLane(Lane& lane, bool patient);
  using Views = InlineVector<kernels::TensorView, kernels::kMaxTensors>;
  // Holds `tensors` (when given and within the budget) in `pending` and launches its check.
  std::optional<Pending> enqueue(Lane& lane, Pending pending, const Views& views, const c10::Stream& stream,
                                 const RoleTensors* tensors = nullptr);
  // Enqueues `tensors` as one dense check on the lane's dense queue (made at its first use).
  // False when they are not all dense or the check cannot be launched: measure them otherwise.
  bool enqueueDense(Lane& lane, const std::vector<at::Tensor>& tensors, Measured done, uint64_t context,
                    const c10::Stream& stream);
  void markInUse(const RoleTensors& tensors, const c10::Stream& stream);
  void release(Pending& pending);
  // What a lane's queue hands its finished checks to (HealthCheckQueue::Ready; the token is the slot).
  std::function<void(uint64_t, const kernels::HealthCounts*, int)> readyFor(Lane& lane);
  void complete(Lane& lane, uint64_t slot, const kernels::HealthCounts* counts, int n);
  std::function<void(uint64_t, const kernels::HealthCounts*, int)> denseReadyFor(Lane& lane);
  static void handOver(Measured done, uint64_t context, const kernels::HealthCounts* counts, int n);
  void recordMeasuredSynchronously(CallEvent rec, const RoleTensors& tensors, const CallArgs& args);
  void measureOnHost(const std::vector<at::Tensor>& tensors, Measured done, uint64_t context);

  const uint64_t id_;  // tells this instance's lanes in a thread's cache from an earlier one's
  std::array<std::atomic<Lane*>, kMaxLanes> lanes_{};
  std::atomic<int> lane_count_{0};
  std::array<bool, kMaxDevices> failed_{};  // no queue can be made on the device
  std::mutex create_mu_;  // only around making or adopting a lane; no other lock is taken inside it
  GraphChecks graphs_;
  std::atomic<int64_t> held_bytes_{0};  // decides, without a lock, whether a call's tensors are held
  std::atomic<int64_t> sync_measures_{0};
  std::atomic<int64_t> dense_launches_{0};
  std::atomic<int64_t> measured_fused_launches_{0};
  std::atomic<int64_t> released_{0};
  std::atomic<int64_t> released_last_{0};
  const int64_t budget_;
};

}  // namespace nanprov
