// DeviceChecks: the health checks of CUDA calls, asynchronous. Each call's tensors are measured
// by one fused kernel on the call's own stream, right after the op; the record reaches the store
// once the results are back, collected without waiting at later calls and step boundaries.
// Tensors are held until their results are known, within a byte budget (NANPROV_HOLD_BYTES);
// beyond it they are released early and the caching allocator is told the check still reads
// them, so their memory is not reused under it. Built without the CUDA toolkit, or where a
// device's queue cannot be made (device_queue.h), every tensor is measured on the host (a counted
// host sync).
//
// Deferred checks (NANPROV_DEFER_CHECKS): a launch costs 8-12 us inside a training process, most
// of a call's probe cost, so a CUDA call whose tensors nanprov holds is not checked at once. It
// joins its thread's batch for its device, with each tensor's version
// counter as it was at the call, and one launch checks the whole batch: when the next call would
// not fit (kernels::kMaxTensors views), comes on another stream, or at the step boundary and exit
// (poll, drain). Before that launch each tensor's version is compared: one changed in place in the
// meantime (a custom autograd Function scaling its incoming gradient with mul_) is left out of the
// check, its call marked `modified` (CallEvent::modified_roles) and judged on the rest, and the
// call's signature (op, backend, phase, layer) is checked at once from then on.
// NANPROV_DEFER_CHECKS=1 defers CUDA calls (opt-in until measured on the H200); 0 (the default)
// checks every call at once; 2 defers
// CPU calls too, through the same code, measured on the host at the flush: CI proves the rule
// there without a GPU. The CPU has no launch to save, and holding a call's tensors until the
// step boundary has a cost there: autograd cannot accumulate a gradient in place into a buffer
// nanprov still holds, so it allocates a new one (SteadyState measured 6 such allocations a step
// with k and v shared by 4 layers). CPU calls are therefore checked at once by default.
// What stays immediate, and why:
//   - tensors not held (over NANPROV_HOLD_BYTES, or in a CUDA graph's memory pool): their memory
//     may be freed and reused by later kernels before a deferred check ran;
//   - calls inside CUDA graph capture (GraphChecks), and inside torch.compile'd graphs: Inductor
//     reuses a dead buffer by writing into it with its own kernels, which bump no version counter;
//   - tensors whose version cannot be read (inference tensors) or that the kernel cannot read.
// What the version counter cannot see: writes that bypass ATen's in-place ops (through
// `tensor.data`, whose counter is a new one, or a custom kernel writing a tensor's memory by its
// pointer). NANPROV_DEFER_CHECKS=0, the default, checks every call at once.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <tuple>
#include <vector>

#include "kernels/health_check.h"
#include "probes/libtorch/call_capture.h"
#include "probes/libtorch/checked_call_sink.h"
#include "probes/libtorch/graph_checks.h"
#include "probes/libtorch/tensor_health.h"
#include "base/inline_vector.h"
#include "base/records/call_event.h"
#include "base/records/call_record.h"

namespace c10 {
class Stream;
}

namespace nanprov {

class KernelTracer;
class Session;

// Fills the counts of rec.tensors[checked[i]] from a kernel's counts[i], i < n.
void takeCounts(CallEvent& rec, const GraphChecks::Checked& checked, const kernels::HealthCounts* counts, int n);

class DeviceChecks {
 public:
  // Checked calls go to `sink` (CallRecorder) once their health is known, from the thread that
  // collects them; what could not be checked is counted in `session`. `tracer` is GraphChecks'.
  DeviceChecks(Session& session, KernelTracer& tracer, CheckedCallSink& sink);
  DeviceChecks(const DeviceChecks&) = delete;
  DeviceChecks& operator=(const DeviceChecks&) = delete;

  // Checks `tensors` (all on the CUDA device rec.device) and records `rec` with their health once known,
  // offering it for capture with `args` (CheckedCallSink). What the fused kernel cannot read
  // (float64, more than 6 dims) is measured synchronously, and counted as a host synchronisation.
  void submit(CallEvent rec, const RoleTensors& tensors, const CallArgs& args);
  // A CPU call's tensors: deferred to its thread's batch as a CUDA call's are, or measured now.
  void submitHost(CallEvent rec, const RoleTensors& tensors, const CallArgs& args);
  // Launches (on CUDA) or measures (on the CPU) every thread's deferred calls. poll() and drain()
  // begin with it; never waits for the GPU.
  void flushDeferred();
  // Deferral's counts so far: calls deferred, launches that checked a batch, calls checked at once
  // because their signature fell back after a tensor changed before its check, and those calls.
  struct DeferStats {
    int64_t deferred = 0, batched_launches = 0, immediate_fallbacks = 0, modified = 0;
  };
  DeferStats deferStats() const;
  int deferMode() const { return defer_; }  // NANPROV_DEFER_CHECKS: 0, 1 (CUDA calls), 2 (CPU calls too)

  // Tensors measured for something other than an attention call (the gradient sentinel, the
  // module trail, the collectives' checks): NaN and Inf counts and the largest finite |x|. All on
  // one CUDA device, checked on the device's current stream, and not held: the caller enqueues
  // them after the work that made them, so stream order keeps their memory valid until the check
  // ran. Up to kMaxMeasuredDense tensors in one dense check (kernels::launchDenseCheck) when each
  // is dense float32/float16/bfloat16 and the dense check runs on this device (denseBatch);
  // otherwise up to kMaxMeasured by the fused kernel, and more than that on the host.
  // `sink` is handed the counts (MeasuredSink) at a later poll, on the polling thread; a check
  // that failed on the device gives n = 0. What neither kernel can read is measured on the host at
  // once, `sink` handed it before measure returns (a counted host synchronisation). Returns false
  // when `sink` will never be handed them: the device's stream is capturing a CUDA graph, so
  // nothing may touch it.
  struct Counts {
    int64_t nan = 0, posinf = 0, neginf = 0;
    double max_abs = 0;  // largest finite |x|
  };
  // Who a measure()'s counts go to: the part that asked, which hands itself with each measure(),
  // so counts collected on any thread reach their owner without looking for the process's probes.
  class MeasuredSink {
   public:
    // `context` as given to measure(); `counts[0..n)` in the order of its tensors.
    void receive(uint64_t context, const Counts* counts, int n) { measured(context, counts, n); }

   protected:
    ~MeasuredSink() = default;  // not owned through this interface

   private:
    virtual void measured(uint64_t context, const Counts* counts, int n) = 0;
  };
  static constexpr int kMaxMeasured = 12;
  static constexpr int kMaxMeasuredDense = kernels::kMaxDense;
  // How many dense tensors one measure() on `device` from this thread takes: kMaxMeasuredDense,
  // or kMaxMeasured where dense checks cannot run there (batch by this to stay on the device).
  int denseBatch(int device);
  // True when `t` can go in a dense check: a dense CUDA tensor the kernel reads.
  static bool denseCheckable(const at::Tensor& t);
  bool measure(const std::vector<at::Tensor>& tensors, MeasuredSink& sink, uint64_t context);

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
    MeasuredSink* measured = nullptr;
    uint64_t context = 0;
    // A launch that checked a batch of deferred calls: `batched` of them, each a Pending in the
    // lane's parts of the slot, its counts at [first, first + checked.size()) of the results.
    // The launch's own rec is unused.
    int batched = 0;
    int first = 0;
  };
  // Calls one batched launch checks at most: forwards of 6 roles fill kMaxTensors views in 4.
  static constexpr int kMaxBatchCalls = 4;
  // A call waiting in its thread's batch, with each tensor's version counter at the call.
  struct Deferred {
    CallEvent rec;        // tensors described (or measured, on the CPU) at the flush
    RoleTensors tensors;  // held since the call
    CallArgs args;
    InlineVector<kernels::TensorView, kMaxCallTensors> views;  // CUDA: the kernel's view of each tensor
    InlineVector<uint32_t, kMaxCallTensors> versions;
    int64_t held_bytes = 0;
  };
  // One thread's deferred calls on one device (-1: the CPU). The owner appends; another thread
  // flushes them at step boundaries (autograd's device threads end a backward with no step).
  struct Batch;
  // A dense check in flight: whom to hand its counts.
  struct Measuring {
    MeasuredSink* sink = nullptr;
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
  bool enqueueDense(Lane& lane, const std::vector<at::Tensor>& tensors, MeasuredSink& sink, uint64_t context,
                    const c10::Stream& stream);
  void markInUse(const RoleTensors& tensors, const c10::Stream& stream);
  void release(Pending& pending);
  // What a lane's queue hands its finished checks to (DeviceQueue::Ready; the token is the slot).
  std::function<void(uint64_t, const kernels::HealthCounts*, int)> readyFor(Lane& lane);
  void complete(Lane& lane, uint64_t slot, const kernels::HealthCounts* counts, int n);
  std::function<void(uint64_t, const kernels::HealthCounts*, int)> denseReadyFor(Lane& lane);
  static void handOver(MeasuredSink& sink, uint64_t context, const kernels::HealthCounts* counts, int n);
  void recordMeasuredSynchronously(CallEvent rec, const RoleTensors& tensors, const CallArgs& args);
  // Defers the call into this thread's batch for `device` (-1: the CPU). False, `rec` untouched,
  // when it must be checked at once (see the header's list).
  bool defer(CallEvent& rec, const RoleTensors& tensors, const CallArgs& args, int device,
             const std::optional<c10::Stream>& stream);
  Batch* batchFor(int device);
  // Checks `calls` (deferred on `device`, on `stream` when CUDA): compares versions, then one
  // launch on this thread's lane, or the host's measure on the CPU.
  void flushCalls(int device, const std::optional<c10::Stream>& stream, std::vector<Deferred>& calls);
  // What falls back together: op, backend, phase and layer (the texts are interned or static).
  using Signature = std::tuple<const char*, const char*, int, int64_t>;
  static Signature signatureOf(const CallEvent& rec);
  bool fellBack(const CallEvent& rec);
  void fallBack(const CallEvent& rec);
  void measureHeldOnHost(Pending& p);
  void measureOnHost(const std::vector<at::Tensor>& tensors, MeasuredSink& sink, uint64_t context);

  const uint64_t id_;  // tells this instance's lanes in a thread's cache from an earlier one's
  Session& session_;
  CheckedCallSink& sink_;
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
  const int defer_;  // NANPROV_DEFER_CHECKS
  std::array<std::atomic<Batch*>, kMaxLanes> batches_{};
  std::atomic<int> batch_count_{0};
  // Signatures (op, backend, phase, layer) checked at once since one of their tensors changed
  // before its deferred check. The count is read first, so the common case takes no lock.
  std::atomic<int> fallback_count_{0};
  std::mutex fallback_mu_;
  std::vector<Signature> fallbacks_;
  std::atomic<int64_t> deferred_{0};
  std::atomic<int64_t> batched_launches_{0};
  std::atomic<int64_t> immediate_fallbacks_{0};
  std::atomic<int64_t> modified_{0};
};

}  // namespace nanprov
