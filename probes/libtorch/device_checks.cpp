#include "probes/libtorch/device_checks.h"

#include <ATen/ATen.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <map>
#include <optional>
#include <memory>
#include <mutex>

#include "base/env.h"
#include "probes/core/probe_cost.h"
#include "probes/core/session.h"

#if NANPROV_HAVE_CUDA
#include "kernels/health_check_queue.h"
#endif

namespace nanprov {
namespace {

std::atomic<int64_t> g_sync_measures{0};

// Measures every tensor on the host and records the call: the path when the fused kernel is
// unavailable.
void recordMeasuredSynchronously(CallRecord rec, const RoleTensors& tensors, const CallArgs& args) {
  for (const auto& [role, t] : tensors) rec.tensors.push_back(measureTensor(t, role));
  g_sync_measures += static_cast<int64_t>(tensors.size());
  recordCheckedCall(std::move(rec), tensors, args);
}

}  // namespace

#if NANPROV_HAVE_CUDA
namespace {

using kernels::HealthCheckQueue;
using kernels::HealthCounts;
using kernels::TensorView;

constexpr int kSlotsPerDevice = 1024;
constexpr int64_t kPollEvery = 8;  // calls between polls for finished checks
constexpr int kMaxDevices = 64;
// Default hold budget: enough for a few calls of a large model in flight.
constexpr int64_t kDefaultHoldBytes = int64_t{2} << 30;

std::optional<kernels::ElementType> elementType(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return kernels::ElementType::kFloat32;
    case at::kHalf: return kernels::ElementType::kFloat16;
    case at::kBFloat16: return kernels::ElementType::kBFloat16;
    case at::kBool: return kernels::ElementType::kBool;
    default: return std::nullopt;
  }
}

static_assert(DeviceChecks::kMaxMeasured <= kernels::kMaxTensors);

// The kernel's view of `t`, or nullopt when it cannot read it.
std::optional<TensorView> viewOf(const at::Tensor& t, bool mask) {
  auto type = elementType(t.scalar_type());
  if (!type || t.dim() > kernels::kMaxDims || !t.has_storage()) return std::nullopt;
  TensorView v;
  v.data = t.data_ptr();
  v.numel = t.numel();
  v.ndim = static_cast<int32_t>(t.dim());
  for (int64_t d = 0; d < t.dim(); ++d) {
    v.sizes[d] = t.size(d);
    v.strides[d] = t.stride(d);
  }
  v.type = *type;
  v.contiguous = t.is_contiguous() ? 1 : 0;
  if (mask) {
    v.mask = *type == kernels::ElementType::kBool ? kernels::MaskKind::kBoolAllow : kernels::MaskKind::kAdditive;
  }
  if (!kernels::checkable(v)) return std::nullopt;
  return v;
}

// A check in flight: an attention call's (recorded once its counts are known), or tensors
// measured for the gradient sentinel (`measured` set: handed their counts, nothing recorded).
struct PendingCheck {
  CallRecord rec;                  // tensors described; counts filled from the kernel
  std::vector<size_t> checked;     // rec.tensors index of each kernel view
  RoleTensors held;                // released once the results are known
  int64_t held_bytes = 0;
  CallArgs args;
  DeviceChecks::Measured measured = nullptr;
  uint64_t context = 0;
};

class Checks {
 public:
  static Checks& get() {
    static Checks* c = new Checks();  // leaked: used until the process exits
    return *c;
  }

  void submit(CallRecord rec, const RoleTensors& tensors, const CallArgs& args) {
    const int device = cudaDeviceOf(tensors);
    if (device < 0) {
      recordMeasuredSynchronously(std::move(rec), tensors, args);
      return;
    }
    c10::impl::VirtualGuardImpl guard(c10::DeviceType::CUDA);
    c10::Stream stream = guard.getStream(c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device)));
    if (kernels::streamIsCapturing(stream.native_handle())) {
      // Replays of the graph never pass through the dispatcher, so these calls cannot be checked
      // at all; touching the stream now would break the user's capture.
      logOnce("graph capture", "attention inside CUDA graph capture is not checked (its replays bypass the probes)");
      Session::get().countUnprobed("attention captured into a CUDA graph (its replays bypass the probes)");
      return;
    }
    HealthCheckQueue* queue = queueFor(device);
    if (!queue) {
      recordMeasuredSynchronously(std::move(rec), tensors, args);
      return;
    }
    // Earlier checks that finished meanwhile, every few calls or when the held tensors near the
    // budget: each poll is a driver query, and step boundaries collect everything anyway.
    if (++submits_ % kPollEvery == 0 || held_bytes_.load(std::memory_order_relaxed) > budget_ / 2) collect(false);

    PendingCheck pending;
    std::vector<TensorView> views;
    for (const auto& [role, t] : tensors) {
      std::optional<TensorView> view =
          t.is_cuda() && t.device().index() == device ? viewOf(t, role == Role::kMask) : std::nullopt;
      if (!view || views.size() == static_cast<size_t>(kernels::kMaxTensors)) {
        rec.tensors.push_back(measureTensor(t, role));  // rare: float64, more than 6 dims
        ++g_sync_measures;
        continue;
      }
      pending.checked.push_back(rec.tensors.size());
      rec.tensors.push_back(describeTensor(t, role));
      views.push_back(*view);
    }
    pending.rec = std::move(rec);
    if (views.empty()) {
      recordCheckedCall(std::move(pending.rec), tensors, args);
      return;
    }
    pending.args = args;
    holdOrRelease(pending, tensors, stream);
    std::optional<PendingCheck> failed = enqueue(*queue, std::move(pending), views, stream);
    if (failed) {
      failed->rec.tensors.clear();
      recordMeasuredSynchronously(std::move(failed->rec), tensors, failed->args);
    }
  }

  void measure(const std::vector<at::Tensor>& tensors, DeviceChecks::Measured done, uint64_t context) {
    std::vector<DeviceChecks::Counts> counts(tensors.size());
    auto onHost = [&] {
      for (size_t i = 0; i < tensors.size(); ++i) {
        TensorHealth h = measureValues(tensors[i]);
        counts[i] = {h.nan, h.posinf, h.neginf};
      }
      g_sync_measures += static_cast<int64_t>(tensors.size());
      done(context, counts.data(), static_cast<int>(counts.size()));
    };
    const int device = tensors.empty() ? -1 : cudaDeviceOf({{Role::kQ, tensors.front()}});
    HealthCheckQueue* queue = device < 0 || tensors.size() > DeviceChecks::kMaxMeasured ? nullptr : queueFor(device);
    std::vector<TensorView> views;
    for (const at::Tensor& t : tensors) {
      std::optional<TensorView> view = t.is_cuda() && t.device().index() == device ? viewOf(t, false) : std::nullopt;
      if (!view) break;
      views.push_back(*view);
    }
    if (!queue || views.size() != tensors.size()) return onHost();  // rare: float64, more than 6 dims
    c10::impl::VirtualGuardImpl guard(c10::DeviceType::CUDA);
    c10::Stream stream = guard.getStream(c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device)));
    if (kernels::streamIsCapturing(stream.native_handle())) {
      logOnce("measure in graph capture", "tensors inside CUDA graph capture are not checked (gradient sentinel)");
      return;
    }
    PendingCheck pending;
    pending.measured = done;
    pending.context = context;
    if (enqueue(*queue, std::move(pending), views, stream)) onHost();
  }

  void collect(bool wait) {
    for (auto& q : queues_) {
      HealthCheckQueue* queue = q.load(std::memory_order_acquire);
      if (!queue) continue;
      auto ready = [this](uint64_t tok, const HealthCounts* c, int n) { complete(tok, c, n); };
      if (wait) queue->drain(ready); else queue->collect(ready);
    }
  }

  int64_t forcedWaits() const {
    int64_t n = 0;
    for (const auto& q : queues_) {
      if (HealthCheckQueue* queue = q.load(std::memory_order_acquire)) n += queue->forcedWaits();
    }
    return n;
  }

  int64_t inFlight() const {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int64_t>(in_flight_.size());
  }

 private:
  HealthCheckQueue* queueFor(int device) {
    if (device < 0 || device >= kMaxDevices) return nullptr;
    if (HealthCheckQueue* q = queues_[device].load(std::memory_order_acquire)) return q;
    std::lock_guard<std::mutex> lock(create_mu_);
    if (HealthCheckQueue* q = queues_[device].load(std::memory_order_acquire)) return q;
    if (failed_[device]) return nullptr;
    auto created = HealthCheckQueue::create(device, kSlotsPerDevice);
    if (!created.ok()) {
      failed_[device] = true;
      logOnce("device queue", "fused health checks unavailable on cuda:" + std::to_string(device) +
                                  ", measuring on the host (slower): " + created.status().message());
      return nullptr;
    }
    HealthCheckQueue* q = created->release();  // leaked: checks may be in flight at exit
    queues_[device].store(q, std::memory_order_release);
    return q;
  }

  // Puts `pending` in flight and launches its check; gives it back when the launch failed.
  std::optional<PendingCheck> enqueue(HealthCheckQueue& queue, PendingCheck pending, const std::vector<TensorView>& views,
                                      const c10::Stream& stream) {
    uint64_t token;
    {
      std::lock_guard<std::mutex> lock(mu_);
      token = next_token_++;
      in_flight_.emplace(token, std::move(pending));
    }
    Status st = Status::Ok();
    {
      ProbeCost::Scope cost(ProbeStage::kLaunching);
      st = queue.submit(views.data(), static_cast<int>(views.size()), stream.native_handle(), token,
                        [this](uint64_t tok, const HealthCounts* c, int n) { complete(tok, c, n); });
    }
    if (st.ok()) return std::nullopt;
    logOnce("device check", "fused health check failed, measuring on the host instead: " + st.message());
    std::lock_guard<std::mutex> lock(mu_);
    auto it = in_flight_.find(token);
    if (it == in_flight_.end()) return std::nullopt;  // completed through the overflow path meanwhile
    held_bytes_ -= it->second.held_bytes;
    std::optional<PendingCheck> failed = std::move(it->second);
    in_flight_.erase(it);
    return failed;
  }

  void holdOrRelease(PendingCheck& pending, const RoleTensors& tensors, const c10::Stream& stream) {
    int64_t bytes = 0;
    for (const auto& [role, t] : tensors) bytes += static_cast<int64_t>(t.nbytes());
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (held_bytes_ + bytes <= budget_) {
        held_bytes_ += bytes;
        pending.held_bytes = bytes;
        pending.held = tensors;
        return;
      }
    }
    // Over budget: not held. Mark the memory as in use on the check's stream so the caching
    // allocator waits for the check before reusing it.
    c10::impl::VirtualGuardImpl guard(c10::DeviceType::CUDA);
    for (const auto& [role, t] : tensors) {
      if (t.has_storage() && t.is_cuda()) guard.recordDataPtrOnStream(t.storage().data_ptr(), stream);
    }
  }

  void complete(uint64_t token, const HealthCounts* counts, int n) {
    PendingCheck pending;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = in_flight_.find(token);
      if (it == in_flight_.end()) return;
      pending = std::move(it->second);
      in_flight_.erase(it);
      held_bytes_ -= pending.held_bytes;
    }
    if (pending.measured) {
      std::vector<DeviceChecks::Counts> measured(static_cast<size_t>(std::max(n, 0)));
      for (int i = 0; i < n; ++i) {
        measured[i] = {static_cast<int64_t>(counts[i].nan), static_cast<int64_t>(counts[i].posinf),
                       static_cast<int64_t>(counts[i].neginf)};
      }
      pending.measured(pending.context, measured.data(), n);
      return;
    }
    if (n != static_cast<int>(pending.checked.size())) {
      logOnce("device check result", "a fused health check failed on the device; its call is not recorded");
      return;
    }
    for (int i = 0; i < n; ++i) {
      TensorHealth& h = pending.rec.tensors[pending.checked[static_cast<size_t>(i)]];
      const HealthCounts& c = counts[i];
      h.nan = static_cast<int64_t>(c.nan);
      h.posinf = static_cast<int64_t>(c.posinf);
      h.neginf = static_cast<int64_t>(c.neginf);
      h.max_abs = c.max_abs;
      h.all_zero = h.numel > 0 && c.nonzero == 0;
      if (h.role == Role::kMask) h.masked_rows = static_cast<int64_t>(c.masked_rows);
    }
    recordCheckedCall(std::move(pending.rec), pending.held, pending.args);
  }

  std::array<std::atomic<HealthCheckQueue*>, kMaxDevices> queues_{};
  std::array<bool, kMaxDevices> failed_{};
  std::mutex create_mu_;  // only around creating a queue; no other lock is taken inside it
  // Guards in_flight_, next_token_ and changes to held_bytes_. Lock order: a queue's own lock
  // before this one: HealthCheckQueue::submit/collect hold theirs while calling complete(), which
  // takes mu_. So mu_ is never held across a queue call, and it is released before a checked
  // call is recorded (the session's locks come after both).
  mutable std::mutex mu_;
  std::map<uint64_t, PendingCheck> in_flight_;
  std::atomic<int64_t> submits_{0};
  uint64_t next_token_ = 1;
  std::atomic<int64_t> held_bytes_{0};  // read without the lock to decide when to poll
  const int64_t budget_ = envInteger("NANPROV_HOLD_BYTES", kDefaultHoldBytes, 0);
};

}  // namespace

DeviceChecks& DeviceChecks::get() {
  static DeviceChecks* d = new DeviceChecks();
  return *d;
}

void DeviceChecks::submit(CallRecord rec, const RoleTensors& tensors, const CallArgs& args) {
  if (tensors.empty()) {
    Session::get().record(std::move(rec));
    return;
  }
  Checks::get().submit(std::move(rec), tensors, args);
}

void DeviceChecks::measure(const std::vector<at::Tensor>& tensors, Measured done, uint64_t context) {
  Checks::get().measure(tensors, done, context);
}

void DeviceChecks::poll() { Checks::get().collect(false); }
void DeviceChecks::drain() { Checks::get().collect(true); }
int64_t DeviceChecks::hostSyncs() const { return g_sync_measures.load() + Checks::get().forcedWaits(); }
int64_t DeviceChecks::checksInFlight() const { return Checks::get().inFlight(); }

#else  // built without the CUDA toolkit: every CUDA call is measured on the host

DeviceChecks& DeviceChecks::get() {
  static DeviceChecks* d = new DeviceChecks();
  return *d;
}

void DeviceChecks::submit(CallRecord rec, const RoleTensors& tensors, const CallArgs& args) {
  logOnce("no fused checks", "nanprov was built without the CUDA toolkit: CUDA tensors are measured on the host");
  recordMeasuredSynchronously(std::move(rec), tensors, args);
}

void DeviceChecks::measure(const std::vector<at::Tensor>& tensors, Measured done, uint64_t context) {
  std::vector<Counts> counts;
  for (const at::Tensor& t : tensors) {
    TensorHealth h = measureValues(t);
    counts.push_back({h.nan, h.posinf, h.neginf});
  }
  g_sync_measures += static_cast<int64_t>(tensors.size());
  done(context, counts.data(), static_cast<int>(counts.size()));
}

void DeviceChecks::poll() {}
void DeviceChecks::drain() {}
int64_t DeviceChecks::hostSyncs() const { return g_sync_measures.load(); }
int64_t DeviceChecks::checksInFlight() const { return 0; }

#endif

}  // namespace nanprov
