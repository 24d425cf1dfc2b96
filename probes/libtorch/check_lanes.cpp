#include "probes/libtorch/check_lanes.h"

#include <string>
#include <utility>

#include "base/log_once.h"
#include "probes/core/probe_cost.h"
#include "probes/libtorch/graph_checks.h"

namespace nanprov::probes {
namespace {

using kernels::HealthCounts;

constexpr int kSlotsPerDevice = 1024;

}  // namespace

CheckLanes::CheckLanes(CheckedCallSink& sink, HeldTensors& held, DeviceQueueFactory make_queue)
    : sink_(sink), held_(held), make_queue_(std::move(make_queue)) {}

CheckLane* CheckLanes::laneFor(int device) {
  if (device < 0 || device >= kMaxDevices) return nullptr;
  return lanes_.get(static_cast<size_t>(device), device, [&](bool room) -> CheckLane* {
    if (failed_[device]) return nullptr;
    if (!room) {
      logOnce("device lanes", "more than " + std::to_string(kMaxLanes) +
                                  " threads ran checked CUDA calls at once: "
                                  "the others are measured on the host (slower)");
      return nullptr;
    }
    auto created = make_queue_(device, kSlotsPerDevice, kernels::CheckKind::kFused);
    if (!created.ok()) {
      failed_[device] = true;
      logOnce("device queue", "fused health checks unavailable on cuda:" + std::to_string(device) +
                                  ", measuring on the host (slower): " + created.status().message());
      return nullptr;
    }
    auto* lane = new CheckLane();  // leaked: checks may be in flight at exit
    lane->device = device;
    lane->queue = created->release();
    lane->pending.resize(static_cast<size_t>(lane->queue->slots()));
    return lane;
  });
}

std::optional<PendingCheck> CheckLanes::enqueue(CheckLane& lane, PendingCheck pending, const Views& views,
                                                const c10::Stream& stream, const RoleTensors* tensors) {
  if (tensors) {
    int64_t bytes = 0;
    for (const auto& [role, t] : *tensors) bytes += static_cast<int64_t>(t.nbytes());
    // In a CUDA graph's memory pool a held tensor would be an allocation the graph's owner does
    // not expect (GraphChecks::inGraphPool): marked in use instead, as past the budget.
    if (!GraphChecks::inGraphPool() && held_.tryHold(bytes)) {
      pending.held_bytes = bytes;
      pending.held = *tensors;
    } else {
      HeldTensors::markInUse(*tensors, stream);
    }
  }
  Status st = Status::Ok();
  const int slot = lane.queue->reserve(readyFor(lane));
  lane.pending[static_cast<size_t>(slot)] = std::move(pending);
  {
    // An attention call's launch; the sentinel's and the trail's count in their own stages.
    std::optional<ProbeCost::Scope> cost;
    if (tensors) cost.emplace(ProbeStage::kLaunching);
    st = lane.queue->submit(views.data(), static_cast<int>(views.size()), stream.native_handle(),
                            static_cast<uint64_t>(slot));
  }
  if (!st.ok()) pending = std::move(lane.pending[static_cast<size_t>(slot)]);  // never published
  if (st.ok()) return std::nullopt;
  logOnce("device check", "fused health check failed, measuring on the host instead: " + st.message());
  held_.unhold(pending.held_bytes);
  return pending;
}

// The capture fits in std::function's own storage: no allocation.
std::function<void(uint64_t, const HealthCounts*, int)> CheckLanes::readyFor(CheckLane& lane) {
  return [this, &lane](uint64_t slot, const HealthCounts* c, int n) { complete(lane, slot, c, n); };
}

std::function<void(uint64_t, const HealthCounts*, int)> CheckLanes::denseReadyFor(CheckLane& lane) {
  return [&lane](uint64_t slot, const HealthCounts* c, int n) {
    const CheckLane::Measuring m = lane.measuring[slot];
    handOver(*m.sink, m.context, c, n);
  };
}

void CheckLanes::complete(CheckLane& lane, uint64_t slot, const HealthCounts* counts, int n) {
  PendingCheck pending = std::move(lane.pending[slot]);
  if (pending.measured) {
    held_.unhold(pending.held_bytes);
    handOver(*pending.measured, pending.context, counts, n);
    return;
  }
  if (pending.batched > 0) {  // deferred calls checked in one launch: each its own slice
    held_.unhold(pending.held_bytes);
    PendingCheck* parts = &lane.parts[slot * CheckLane::kMaxBatchCalls];
    size_t total = 0;
    for (int i = 0; i < pending.batched; ++i) total += parts[i].checked.size();
    if (n != static_cast<int>(total)) {
      logOnce("device check result", "a batched health check failed on the device; its calls are not recorded");
    }
    for (int i = 0; i < pending.batched; ++i) {
      PendingCheck& p = parts[i];
      if (n == static_cast<int>(total)) {
        takeCounts(p.rec, p.checked, counts + p.first, static_cast<int>(p.checked.size()));
        sink_.record(std::move(p.rec), p.held, p.args, p.missing);
      }
      release(p);
      p.checked.clear();
    }
    return;
  }
  if (n != static_cast<int>(pending.checked.size())) {
    logOnce("device check result", "a fused health check failed on the device; its call is not recorded");
    if (pending.forward) pending.forward->fail();
    held_.unhold(pending.held_bytes);
    release(pending);
    return;
  }
  takeCounts(pending.rec, pending.checked, counts, n);
  if (pending.forward) pending.forward->fill(pending.rec.tensors);
  if (recordWithForward(pending)) return;
  // Its forward's counts are still to come (that forward's lane not collected yet): parked, its
  // tensors held, until a later collection brings them.
  std::lock_guard<std::mutex> lock(parked_mu_);
  parked_.push_back(std::move(pending));
  any_parked_.store(true, std::memory_order_release);
}

bool CheckLanes::recordWithForward(PendingCheck& pending) {
  if (!pending.inherited.empty()) {
    const ForwardCounts::State state = pending.inherited.forward->state();
    if (state == ForwardCounts::State::kPending) return false;
    if (state == ForwardCounts::State::kFailed) {
      logOnce("forward check failed",
              "a forward's health check failed on the device or did not finish by exit; its backward, which "
              "takes the forward's counts for the tensors it passes on, is not recorded either");
      held_.unhold(pending.held_bytes);
      release(pending);
      return true;
    }
    pending.inherited.fillInto(pending.rec);
  }
  held_.unhold(pending.held_bytes);
  sink_.record(std::move(pending.rec), pending.held, pending.args, pending.missing);
  release(pending);
  return true;
}

void CheckLanes::recordParked(bool all, int* unfinished) {
  if (!any_parked_.load(std::memory_order_acquire)) return;
  // In place, under the lock: the vector keeps its capacity, so parking allocates only while the
  // most backwards ever parked at once grows. Recording takes no lock of the lanes'.
  std::lock_guard<std::mutex> lock(parked_mu_);
  size_t kept = 0;
  for (PendingCheck& pending : parked_) {
    if (all && pending.inherited.forward->state() == ForwardCounts::State::kPending) {
      // Every check was handed over, and this forward's counts never came.
      if (unfinished) ++*unfinished;
      held_.unhold(pending.held_bytes);
      release(pending);
      continue;
    }
    if (recordWithForward(pending)) continue;
    if (&parked_[kept] != &pending) parked_[kept] = std::move(pending);  // a vector moved onto itself empties
    ++kept;
  }
  parked_.erase(parked_.begin() + static_cast<std::ptrdiff_t>(kept), parked_.end());
  any_parked_.store(kept > 0, std::memory_order_release);
}

void CheckLanes::collect(bool patient) {
  lanes_.forEach([&](CheckLane& lane) { collectOne(lane, patient); });
  recordParked(false);
}

void CheckLanes::collectLane(CheckLane& lane, bool patient) {
  collectOne(lane, patient);
  // A backward waits for its forward's counts, most often in the training thread's lane while
  // this is an autograd thread's: every lane's finished checks, without waiting for a collector.
  if (any_parked_.load(std::memory_order_acquire)) collect(false);
}

void CheckLanes::collectOne(CheckLane& lane, bool patient) {
  lane.queue->collect(readyFor(lane), patient);
  if (DeviceQueue* dense = lane.dense.load(std::memory_order_acquire)) dense->collect(denseReadyFor(lane), patient);
}

void CheckLanes::drain(DeviceQueue::Clock::time_point deadline, int* unfinished) {
  lanes_.forEach([&](CheckLane& lane) {
    lane.queue->drain(readyFor(lane), deadline, unfinished);
    if (DeviceQueue* dense = lane.dense.load(std::memory_order_acquire)) {
      dense->drain(denseReadyFor(lane), deadline, unfinished);
    }
  });
  recordParked(true, unfinished);
}

void CheckLanes::recordOnHost(CallEvent rec, const RoleTensors& tensors, const CallArgs& args) {
  for (const auto& [role, t] : tensors) rec.tensors.push_back(measureTensor(t, role));
  sync_measures_ += static_cast<int64_t>(tensors.size());
  sink_.record(std::move(rec), tensors, args);
}

int CheckLanes::firstDevice() const {
  int first = -1;
  lanes_.forEach([&](const CheckLane& lane) {
    if (first < 0 || lane.device < first) first = lane.device;
  });
  return first;
}

int64_t CheckLanes::hostSyncs() const {
  int64_t n = sync_measures_.load();
  lanes_.forEach([&](const CheckLane& lane) {
    n += lane.queue->forcedWaits();
    if (const DeviceQueue* dense = lane.dense.load(std::memory_order_acquire)) n += dense->forcedWaits();
  });
  return n;
}

}  // namespace nanprov::probes
