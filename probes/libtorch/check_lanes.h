// CheckLanes: where DeviceChecks' checks go and how they come back. Each thread that checks a
// CUDA call gets a lane on the call's device: a DeviceQueue (device_queue.h) of slots, the
// Pending of each slot, and a second queue for dense checks made at its first one. Only the
// lane's thread submits, so submitting takes no lock; any thread collects what finished and hands
// it on: an attention call's record to the CheckedCallSink (with its held tensors released), a
// measure()'s counts to its MeasuredSink. A thread's lane is adopted by the next new thread once
// it ended (ThreadSlots); lanes are never freed, as checks may be in flight at exit.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "base/records/call_event.h"
#include "base/status.h"
#include "kernels/health_check.h"
#include "probes/libtorch/call_capture.h"
#include "probes/libtorch/check_views.h"
#include "probes/libtorch/checked_call_sink.h"
#include "probes/libtorch/device_queue.h"
#include "probes/libtorch/forward_checks.h"
#include "probes/libtorch/held_tensors.h"
#include "probes/libtorch/measured_sink.h"
#include "probes/libtorch/tensor_health.h"
#include "probes/libtorch/thread_slots.h"

namespace c10 {
class Stream;
}

namespace nanprov::probes {

// A check in flight: an attention call's (recorded once its counts are known), or tensors
// measured for the gradient sentinel (`measured` set: handed their counts, nothing recorded).
struct PendingCheck {
  CallEvent rec;           // tensors described; counts filled from the kernel
  CheckedTensors checked;  // rec.tensors index of each kernel view
  RoleTensors held;        // released once the results are known
  int64_t held_bytes = 0;
  CallArgs args;
  const char* missing = nullptr;  // why `held` is empty, when it is not the hold budget
  MeasuredSink* measured = nullptr;
  uint64_t context = 0;
  // A launch that checked a batch of deferred calls: `batched` of them, each a PendingCheck in the
  // lane's parts of the slot, its counts at [first, first + checked.size()) of the results.
  // The launch's own rec is unused.
  int batched = 0;
  int first = 0;
  // A forward's: the counts its backward may take (ForwardChecks), filled once they are known.
  ForwardCountsRef forward;
  // A backward's: its tensors whose counts come from its forward's check, not read again.
  InheritedTensors inherited;
};

// The checks one thread enqueued on one device: its queue, and the PendingCheck of each of the
// queue's slots.
struct CheckLane {
  // Calls one batched launch checks at most: forwards of 6 roles fill kMaxTensors views in 4.
  static constexpr int kMaxBatchCalls = 4;
  // A dense check in flight: whom to hand its counts.
  struct Measuring {
    MeasuredSink* sink = nullptr;
    uint64_t context = 0;
  };

  int device = -1;
  DeviceQueue* queue = nullptr;
  std::vector<PendingCheck> pending;  // by slot: written by the owner before it publishes the slot
  // A batched launch's calls: kMaxBatchCalls per slot, as `pending`; made at the first one.
  std::vector<PendingCheck> parts;
  // Dense checks: a second queue, made by the owner at its first dense check (collectors load it).
  std::atomic<DeviceQueue*> dense{nullptr};
  std::vector<Measuring> measuring;  // by the dense queue's slot, as `pending`
  bool dense_failed = false;         // owner only: no dense queue, or its launch failed
  int64_t measures = 0;              // owner only
  int64_t submits = 0;               // owner only
  std::atomic<bool> owned{true};     // false once the owning thread ended
};

class CheckLanes {
 public:
  static constexpr int kMaxDevices = 64;
  static constexpr int kMaxLanes = 256;

  // Finished calls go to `sink`, their tensors released through `held`; queues are made by
  // `make_queue`.
  CheckLanes(CheckedCallSink& sink, HeldTensors& held, DeviceQueueFactory make_queue);
  CheckLanes(const CheckLanes&) = delete;
  CheckLanes& operator=(const CheckLanes&) = delete;

  // This thread's lane on `device`, made (or adopted) at its first check there. nullptr when no
  // queue can be made on the device: its checks are then measured on the host.
  CheckLane* laneFor(int device);
  // A queue of `slots` on `device` for `kind` (a lane's dense queue, made at its first use).
  StatusOr<std::unique_ptr<DeviceQueue>> makeQueue(int device, int slots, kernels::CheckKind kind) const {
    return make_queue_(device, slots, kind);
  }

  // Holds `tensors` (when given and within the budget) in `pending` and launches its check of
  // `views` on `stream`. The PendingCheck back when the launch failed (nothing held).
  std::optional<PendingCheck> enqueue(CheckLane& lane, PendingCheck pending, const Views& views,
                                      const c10::Stream& stream, const RoleTensors* tensors = nullptr);
  // What a lane's queue hands its finished checks to (DeviceQueue::Ready; the token is the slot).
  std::function<void(uint64_t, const kernels::HealthCounts*, int)> readyFor(CheckLane& lane);
  static std::function<void(uint64_t, const kernels::HealthCounts*, int)> denseReadyFor(CheckLane& lane);

  // Every lane's finished checks, never waiting for the GPU; then the backwards waiting for their
  // forward's counts that have them now.
  void collect(bool patient);
  // One lane's; where a backward waits for its forward's counts, every lane's (without waiting).
  void collectLane(CheckLane& lane, bool patient);
  // Waits for every lane's checks until `deadline`, counting those unfinished then; a backward
  // whose forward's counts never came is counted with them.
  void drain(DeviceQueue::Clock::time_point deadline, int* unfinished);

  // Measures `tensors` on the host and records `rec` with them (a counted host synchronisation).
  void recordOnHost(CallEvent rec, const RoleTensors& tensors, const CallArgs& args);
  void countHostSyncs(int64_t n) { sync_measures_.fetch_add(n); }
  int64_t hostSyncs() const;  // synchronisations nanprov added (fallbacks, full queues)
  int firstDevice() const;    // the lowest CUDA device checks ran on; -1 while none has

 private:
  void collectOne(CheckLane& lane, bool patient);
  void complete(CheckLane& lane, uint64_t slot, const kernels::HealthCounts* counts, int n);
  // Records a counted call whose inherited tensors' counts are known; one whose forward's check
  // failed is dropped. False, nothing done, while the forward's counts are still to come.
  bool recordWithForward(PendingCheck& pending);
  // Records the parked backwards whose forward's counts came (all of them with `all`: at exit,
  // after every check was handed over, a forward's that never came is failed).
  void recordParked(bool all, int* unfinished = nullptr);
  void release(PendingCheck& pending) { held_.release(pending.held, pending.args); }

  CheckedCallSink& sink_;
  HeldTensors& held_;
  const DeviceQueueFactory make_queue_;
  ThreadSlots<CheckLane, kMaxDevices, kMaxLanes> lanes_;
  std::array<bool, kMaxDevices> failed_{};  // no queue can be made on the device
  std::atomic<int64_t> sync_measures_{0};
  // Backwards checked before their forward's counts were collected (ForwardChecks).
  std::mutex parked_mu_;
  std::vector<PendingCheck> parked_;
  std::atomic<bool> any_parked_{false};
};

}  // namespace nanprov::probes
