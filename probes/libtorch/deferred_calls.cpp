#include "probes/libtorch/deferred_calls.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "base/env.h"
#include "base/log_once.h"
#include "base/records/roles.h"
#include "probes/core/probe_cost.h"
#include "probes/core/session.h"
#include "probes/libtorch/graph_checks.h"

namespace nanprov::probes {
namespace {

using kernels::TensorView;

constexpr const char* kModifiedUnprobed =
    "attention tensors changed in place before their deferred check (left out of it; the call is judged on the rest)";

}  // namespace

struct DeferredCalls::Batch {
  int device = -1;                    // -1: the CPU
  std::vector<Deferred> calls;        // flushed in place: keeps its capacity
  std::optional<c10::Stream> stream;  // the calls' stream (CUDA)
  int views = 0;                      // their tensors: at most kernels::kMaxTensors
  std::atomic<bool> owned{true};      // false once the owning thread ended
  // The owner appends and flushes; another thread flushes only at step boundaries and exit. A
  // claim, as HealthCheckQueue's collectors take turns: one atomic exchange when uncontended (a
  // std::mutex would cost a steady call a lock it need not take), a yield while another holds it.
  std::atomic<bool> claimed{false};
  void claim() {
    while (claimed.exchange(true, std::memory_order_acquire)) std::this_thread::yield();
  }
  void release() { claimed.store(false, std::memory_order_release); }
};

DeferredCalls::DeferredCalls(Session& session, CheckedCallSink& sink, CheckLanes& lanes, HeldTensors& held)
    : session_(session),
      sink_(sink),
      lanes_(lanes),
      held_(held),
      defer_(static_cast<int>(std::min<int64_t>(envInteger("NANPROV_DEFER_CHECKS", 0, 0), 2))) {}

bool DeferredCalls::defer(CallEvent& rec, const RoleTensors& tensors, const CallArgs& args, int device,
                          const std::optional<c10::Stream>& stream) {
  // Not held in a CUDA graph's pool (GraphChecks::inGraphPool): memory not held may be reused by
  // later kernels before a deferred check ran, so those calls stay immediate (marked in use).
  if (defer_ < (device < 0 ? 2 : 1) || tensors.empty() || tensors.size() > kMaxCallTensors ||
      GraphChecks::inGraphPool())
    return false;
  static_assert(kMaxCallTensors <= static_cast<size_t>(kernels::kMaxTensors), "one call must fit one launch");
  if (fellBack(rec)) {
    immediate_fallbacks_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  Deferred d;
  int64_t bytes = 0;
  for (const auto& [role, t] : tensors) {
    // An inference tensor has no version counter to compare; a tensor without storage no memory.
    if (!t.defined() || !t.has_storage() || t.is_inference()) return false;
    if (device >= 0) {
      std::optional<TensorView> view =
          t.is_cuda() && t.device().index() == device ? viewOf(t, holdsMaskedRows(role)) : std::nullopt;
      if (!view) return false;  // float64, more than 6 dims: measured on the host at the call
      d.views.push_back(*view);
    } else if (!t.is_cpu()) {
      return false;
    }
    d.versions.push_back(versionOf(t));
    bytes += static_cast<int64_t>(t.nbytes());
  }
  // Held within the budget, or not deferred: past it the immediate path marks the memory in use.
  if (!held_.tryHold(bytes)) return false;
  Batch* batch = batchFor(device);
  if (!batch) {
    held_.unhold(bytes);
    return false;
  }
  d.rec = std::move(rec);
  d.tensors = tensors;
  d.args = args;  // IValues that may hold tensors, held as the tensors are
  d.held_bytes = bytes;
  const int n = static_cast<int>(tensors.size());
  batch->claim();
  // A batch is one launch on one stream: a call that does not fit, or comes on another stream,
  // sends the batch before it (launched on the batch's stream, after every call in it). Flushed
  // in place, so the vector keeps its capacity: a steady call allocates nothing.
  if (!batch->calls.empty() &&
      (batch->views + n > kernels::kMaxTensors || static_cast<int>(batch->calls.size()) == CheckLane::kMaxBatchCalls ||
       batch->stream != stream)) {
    // The batch's stream capturing a CUDA graph now (another stream's call came meanwhile): no
    // launch may go there until it ends, so the batch waits and this call is checked at once.
    if (batch->stream && capturing(*batch->stream)) {
      batch->release();
      held_.unhold(bytes);
      rec = std::move(d.rec);
      return false;
    }
    flushCalls(device, batch->stream, batch->calls);
    batch->views = 0;
  }
  batch->calls.push_back(std::move(d));
  batch->views += n;
  batch->stream = stream;
  batch->release();
  deferred_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void DeferredCalls::flush() {
  batches_.forEach([&](Batch& batch) {
    batch.claim();
    // Never into a graph being captured on the batch's stream: those calls wait for a later flush.
    if (!batch.calls.empty() && !(batch.stream && capturing(*batch.stream))) {
      flushCalls(batch.device, batch.stream, batch.calls);
      batch.views = 0;
    }
    batch.release();
  });
}

void DeferredCalls::flushCalls(int device, const std::optional<c10::Stream>& stream, std::vector<Deferred>& calls) {
  // On CUDA the batch's one check goes into a slot of this thread's lane (on the calls' stream),
  // each call's PendingCheck into that slot's parts.
  CheckLane* lane = device >= 0 && stream ? lanes_.laneFor(device) : nullptr;
  int slot = -1;
  PendingCheck* parts = nullptr;
  if (lane) {
    slot = lane->queue->reserve(lanes_.readyFor(*lane));
    if (lane->parts.empty()) {
      // Made once, at the lane's first batched launch, never resized: kMaxBatchCalls PendingChecks
      // a slot (a few MB), so a batched launch allocates nothing.
      lane->parts.resize(lane->pending.size() * CheckLane::kMaxBatchCalls);
    }
    parts = &lane->parts[static_cast<size_t>(slot) * CheckLane::kMaxBatchCalls];
  }
  int batched = 0;
  int64_t batched_bytes = 0;
  Views views;
  for (Deferred& d : calls) {
    PendingCheck p;
    p.rec = std::move(d.rec);
    p.args = std::move(d.args);
    for (size_t i = 0; i < d.tensors.size(); ++i) {
      const auto& [role, t] = d.tensors[i];
      // Changed in place since the call (its version counter moved): what a check would read now
      // is not what the call took or made. Left out, never counted as clean; the call is judged on
      // the rest of its tensors and marked, so the report can say what was not checked.
      if (versionOf(t) != d.versions[i]) {
        p.rec.modified_roles |= 1u << static_cast<int>(role);
        continue;
      }
      if (device < 0) {
        p.rec.tensors.push_back(measureTensor(t, role));
      } else {
        p.checked.push_back(static_cast<uint8_t>(p.rec.tensors.size()));
        p.rec.tensors.push_back(describeTensor(t, role));
        views.push_back(d.views[i]);
      }
      p.held.emplace_back(role, t);  // a changed tensor is not kept: nothing reads it
    }
    d.tensors.clear();
    if (p.rec.modified_roles != 0) {
      modified_.fetch_add(1, std::memory_order_relaxed);
      fallBack(p.rec);
      session_.countUnprobed(kModifiedUnprobed);
    }
    if (device < 0 || p.checked.empty()) {  // the CPU, or nothing left to launch for
      held_.unhold(d.held_bytes);
      sink_.record(std::move(p.rec), p.held, p.args);
      continue;
    }
    p.first = static_cast<int>(views.size() - p.checked.size());
    p.held_bytes = d.held_bytes;
    batched_bytes += d.held_bytes;
    if (parts) {
      parts[batched++] = std::move(p);
    } else {  // no lane on the device (no queue could be made there)
      measureHeldOnHost(p);
    }
  }
  calls.clear();
  if (batched == 0) return;
  Status st = Status::Ok();
  PendingCheck launch;  // the batch's one check; its calls are the slot's parts
  launch.held_bytes = batched_bytes;
  launch.batched = batched;
  lane->pending[static_cast<size_t>(slot)] = std::move(launch);
  {
    ProbeCost::Scope cost(ProbeStage::kLaunching);
    st = lane->queue->submit(views.data(), static_cast<int>(views.size()), stream->native_handle(),
                             static_cast<uint64_t>(slot));
  }
  if (st.ok()) {
    batched_launches_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  logOnce("device check", "batched health check failed, measuring on the host instead: " + st.message());
  for (int i = 0; i < batched; ++i) {
    measureHeldOnHost(parts[i]);
    parts[i] = PendingCheck();
  }
}

// A deferred call whose batched check cannot run: its held tensors measured on the host instead
// (a counted host synchronisation), its hold released.
void DeferredCalls::measureHeldOnHost(PendingCheck& p) {
  held_.unhold(p.held_bytes);
  p.rec.tensors.clear();
  lanes_.recordOnHost(std::move(p.rec), p.held, p.args);
}

// The signature a changed tensor sends back to immediate checks: the same op and backend, in the
// same phase of the same layer, is where the same in-place change will come again.
DeferredCalls::Signature DeferredCalls::signatureOf(const CallEvent& rec) {
  return {rec.op, rec.backend, static_cast<int>(rec.phase), rec.layer};
}

bool DeferredCalls::fellBack(const CallEvent& rec) {
  if (fallback_count_.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard<std::mutex> lock(fallback_mu_);
  return std::find(fallbacks_.begin(), fallbacks_.end(), signatureOf(rec)) != fallbacks_.end();
}

void DeferredCalls::fallBack(const CallEvent& rec) {
  const Signature key = signatureOf(rec);
  std::lock_guard<std::mutex> lock(fallback_mu_);
  if (std::find(fallbacks_.begin(), fallbacks_.end(), key) != fallbacks_.end()) return;
  fallbacks_.push_back(key);
  fallback_count_.store(static_cast<int>(fallbacks_.size()), std::memory_order_release);
}

DeferStats DeferredCalls::stats() const {
  return {deferred_.load(std::memory_order_relaxed), batched_launches_.load(std::memory_order_relaxed),
          immediate_fallbacks_.load(std::memory_order_relaxed), modified_.load(std::memory_order_relaxed)};
}

// This thread's batch for `device` (-1: the CPU), made (or adopted from an ended thread) at its
// first deferred call there. nullptr past kMaxLanes batches: those calls are checked at once.
DeferredCalls::Batch* DeferredCalls::batchFor(int device) {
  if (device < -1 || device >= CheckLanes::kMaxDevices) return nullptr;
  return batches_.get(static_cast<size_t>(device + 1), device, [&](bool room) -> Batch* {
    if (!room) return nullptr;
    auto* batch = new Batch();  // leaked, as lanes are: a flush may be reading it at exit
    batch->device = device;
    return batch;
  });
}

}  // namespace nanprov::probes
