// DeferredCalls (NANPROV_DEFER_CHECKS): a launch costs 8-12 us inside a training process, most
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

#include <c10/core/Stream.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <tuple>
#include <vector>

#include "base/inline_vector.h"
#include "base/records/call_event.h"
#include "kernels/health_check.h"
#include "probes/libtorch/call_capture.h"
#include "probes/libtorch/check_lanes.h"
#include "probes/libtorch/checked_call_sink.h"
#include "probes/libtorch/held_tensors.h"
#include "probes/libtorch/tensor_health.h"
#include "probes/libtorch/thread_slots.h"

namespace nanprov::probes {

class Session;

// Deferral's counts so far: calls deferred, launches that checked a batch, calls checked at once
// because their signature fell back after a tensor changed before its check, and those calls.
struct DeferStats {
  int64_t deferred = 0, batched_launches = 0, immediate_fallbacks = 0, modified = 0;
};

class DeferredCalls {
 public:
  // Deferred calls go to `sink` once checked; what was left out is counted in `session`. CUDA
  // batches launch on this thread's lane (`lanes`); their tensors count against `held`.
  DeferredCalls(Session& session, CheckedCallSink& sink, CheckLanes& lanes, HeldTensors& held);
  DeferredCalls(const DeferredCalls&) = delete;
  DeferredCalls& operator=(const DeferredCalls&) = delete;

  int mode() const { return defer_; }  // NANPROV_DEFER_CHECKS: 0, 1 (CUDA calls), 2 (CPU calls too)
  // Defers the call into this thread's batch for `device` (-1: the CPU) on `stream` (CUDA). False,
  // `rec` untouched, when it must be checked at once (see above).
  bool defer(CallEvent& rec, const RoleTensors& tensors, const CallArgs& args, int device,
             const std::optional<c10::Stream>& stream);
  // Launches (on CUDA) or measures (on the CPU) every thread's deferred calls; never waits for the GPU.
  void flush();
  DeferStats stats() const;

 private:
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

  Batch* batchFor(int device);
  // Checks `calls` (deferred on `device`, on `stream` when CUDA): compares versions, then one
  // launch on this thread's lane, or the host's measure on the CPU.
  void flushCalls(int device, const std::optional<c10::Stream>& stream, std::vector<Deferred>& calls);
  // What falls back together: op, backend, phase and layer (the texts are interned or static).
  using Signature = std::tuple<const char*, const char*, int, int64_t>;
  static Signature signatureOf(const CallEvent& rec);
  bool fellBack(const CallEvent& rec);
  void fallBack(const CallEvent& rec);
  void measureHeldOnHost(PendingCheck& p);

  Session& session_;
  CheckedCallSink& sink_;
  CheckLanes& lanes_;
  HeldTensors& held_;
  const int defer_;  // NANPROV_DEFER_CHECKS
  // Batches by device + 1 (0: the CPU).
  ThreadSlots<Batch, CheckLanes::kMaxDevices + 1, CheckLanes::kMaxLanes> batches_;
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

}  // namespace nanprov::probes
