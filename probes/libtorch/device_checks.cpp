#include "probes/libtorch/device_checks.h"

#include <ATen/ATen.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <algorithm>
#include <cstdlib>
#include <memory>

#include "base/env.h"
#include "probes/core/probe_cost.h"
#include "probes/libtorch/probes.h"

#if NANPROV_HAVE_CUDA
#include "kernels/health_check_queue.h"
#endif

namespace nanprov {
namespace {

using kernels::HealthCheckQueue;
using kernels::HealthCounts;
using kernels::TensorView;

constexpr int kSlotsPerDevice = 1024;
constexpr int64_t kPollEvery = 8;  // calls between polls for finished checks
// Default hold budget: enough for a few calls of a large model in flight.
constexpr int64_t kDefaultHoldBytes = int64_t{2} << 30;

static_assert(DeviceChecks::kMaxMeasured <= kernels::kMaxTensors);

std::optional<kernels::ElementType> elementType(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return kernels::ElementType::kFloat32;
    case at::kHalf: return kernels::ElementType::kFloat16;
    case at::kBFloat16: return kernels::ElementType::kBFloat16;
    case at::kBool: return kernels::ElementType::kBool;
    default: return std::nullopt;
  }
}

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
#if NANPROV_HAVE_CUDA
  if (!kernels::checkable(v)) return std::nullopt;
#endif
  return v;
}

c10::Stream currentStream(int device) {
  c10::impl::VirtualGuardImpl guard(c10::DeviceType::CUDA);
  return guard.getStream(c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device)));
}

bool capturing(const c10::Stream& stream) {
#if NANPROV_HAVE_CUDA
  return kernels::streamIsCapturing(stream.native_handle());
#else
  (void)stream;
  return false;
#endif
}

}  // namespace

DeviceChecks::DeviceChecks() : budget_(envInteger("NANPROV_HOLD_BYTES", kDefaultHoldBytes, 0)) {}

void DeviceChecks::recordMeasuredSynchronously(CallEvent rec, const RoleTensors& tensors, const CallArgs& args) {
  for (const auto& [role, t] : tensors) rec.tensors.push_back(measureTensor(t, role));
  sync_measures_ += static_cast<int64_t>(tensors.size());
  recordCheckedCall(std::move(rec), tensors, args);
}

void DeviceChecks::submit(CallEvent rec, const RoleTensors& tensors, const CallArgs& args) {
  if (tensors.empty()) {
    probes().session().record(rec);
    return;
  }
  const int device = cudaDeviceOf(tensors);
  if (device < 0) {
    recordMeasuredSynchronously(std::move(rec), tensors, args);
    return;
  }
  c10::Stream stream = currentStream(device);
  if (capturing(stream)) {
    // Replays of the graph never pass through the dispatcher, so these calls cannot be checked
    // at all; touching the stream now (even a copy to the host) would break the user's capture.
    logOnce("graph capture", "attention inside CUDA graph capture is not checked (its replays bypass the probes)");
    probes().session().countUnprobed("attention captured into a CUDA graph (its replays bypass the probes)");
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

  Pending pending;
  Views views;
  for (const auto& [role, t] : tensors) {
    std::optional<TensorView> view =
        t.is_cuda() && t.device().index() == device ? viewOf(t, role == Role::kMask) : std::nullopt;
    if (!view || views.size() == views.capacity()) {
      rec.tensors.push_back(measureTensor(t, role));  // rare: float64, more than 6 dims
      ++sync_measures_;
      continue;
    }
    pending.checked.push_back(static_cast<uint8_t>(rec.tensors.size()));
    rec.tensors.push_back(describeTensor(t, role));
    views.push_back(*view);
  }
  pending.rec = rec;
  if (views.empty()) {
    recordCheckedCall(pending.rec, tensors, args);
    return;
  }
  pending.args = args;
  std::optional<Pending> failed = enqueue(*queue, std::move(pending), views, stream, &tensors);
  if (failed) {
    failed->rec.tensors.clear();
    recordMeasuredSynchronously(std::move(failed->rec), tensors, failed->args);
  }
}

void DeviceChecks::measureOnHost(const std::vector<at::Tensor>& tensors, Measured done, uint64_t context) {
  std::vector<Counts> counts(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    TensorHealth h = measureValues(tensors[i]);
    counts[i] = {h.nan, h.posinf, h.neginf, h.max_abs};
  }
  sync_measures_ += static_cast<int64_t>(tensors.size());
  done(context, counts.data(), static_cast<int>(counts.size()));
}

bool DeviceChecks::measure(const std::vector<at::Tensor>& tensors, Measured done, uint64_t context) {
  const int device = !tensors.empty() && tensors.front().is_cuda() ? tensors.front().device().index() : -1;
  std::optional<c10::Stream> stream;
  if (device >= 0) {
    stream = currentStream(device);
    if (capturing(*stream)) {
      logOnce("measure in graph capture", "tensors inside CUDA graph capture are not checked (gradient sentinel)");
      return false;
    }
  }
  HealthCheckQueue* queue = device < 0 || tensors.size() > kMaxMeasured ? nullptr : queueFor(device);
  Views views;
  for (const at::Tensor& t : tensors) {
    std::optional<TensorView> view = t.is_cuda() && t.device().index() == device ? viewOf(t, false) : std::nullopt;
    if (!view) break;
    views.push_back(*view);
  }
  if (!queue || !stream || views.size() != tensors.size()) {  // rare: float64, no queue on the device
    measureOnHost(tensors, done, context);
    return true;
  }
  Pending pending;
  pending.measured = done;
  pending.context = context;
  if (enqueue(*queue, std::move(pending), views, *stream)) measureOnHost(tensors, done, context);
  return true;
}

void DeviceChecks::poll() { collect(false); }
void DeviceChecks::drain() { collect(true); }

int DeviceChecks::firstDevice() const {
  for (int d = 0; d < kMaxDevices; ++d) {
    if (queues_[d].load(std::memory_order_acquire)) return d;
  }
  return -1;
}

int64_t DeviceChecks::hostSyncs() const {
  int64_t n = sync_measures_.load();
#if NANPROV_HAVE_CUDA
  for (const auto& q : queues_) {
    if (HealthCheckQueue* queue = q.load(std::memory_order_acquire)) n += queue->forcedWaits();
  }
#endif
  return n;
}

int64_t DeviceChecks::checksInFlight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(in_flight_.size());
}

void DeviceChecks::collect(bool wait) {
#if NANPROV_HAVE_CUDA
  for (auto& q : queues_) {
    HealthCheckQueue* queue = q.load(std::memory_order_acquire);
    if (!queue) continue;
    auto ready = [this](uint64_t tok, const HealthCounts* c, int n) { complete(tok, c, n); };
    if (wait) queue->drain(ready); else queue->collect(ready);
  }
#else
  (void)wait;
#endif
}

HealthCheckQueue* DeviceChecks::queueFor(int device) {
#if NANPROV_HAVE_CUDA
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
#else
  logOnce("no fused checks", "nanprov was built without the CUDA toolkit: CUDA tensors are measured on the host");
  (void)device;
  return nullptr;
#endif
}

std::optional<DeviceChecks::Pending> DeviceChecks::enqueue(HealthCheckQueue& queue, Pending pending, const Views& views,
                                                           const c10::Stream& stream, const RoleTensors* tensors) {
  uint64_t token;
  bool held = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    token = next_token_++;
    if (tensors) {
      int64_t bytes = 0;
      for (const auto& [role, t] : *tensors) bytes += static_cast<int64_t>(t.nbytes());
      held = held_bytes_ + bytes <= budget_;
      if (held) {
        held_bytes_ += bytes;
        pending.held_bytes = bytes;
        pending.held = *tensors;
      }
    }
    if (free_nodes_.empty()) {
      in_flight_.emplace(token, std::move(pending));
    } else {
      InFlight::node_type node = std::move(free_nodes_.back());
      free_nodes_.pop_back();
      node.key() = token;
      node.mapped() = std::move(pending);
      in_flight_.insert(std::move(node));
    }
  }
  if (!held) markInUse(*tensors, stream);
  Status st = Status::Ok();
#if NANPROV_HAVE_CUDA
  {
    ProbeCost::Scope cost(ProbeStage::kLaunching);
    st = queue.submit(views.data(), static_cast<int>(views.size()), stream.native_handle(), token,
                      [this](uint64_t tok, const HealthCounts* c, int n) { complete(tok, c, n); });
  }
#else
  (void)queue, (void)views, (void)stream;
  st = Status::Error("built without the CUDA toolkit");
#endif
  if (st.ok()) return std::nullopt;
  logOnce("device check", "fused health check failed, measuring on the host instead: " + st.message());
  std::lock_guard<std::mutex> lock(mu_);
  auto it = in_flight_.find(token);
  if (it == in_flight_.end()) return std::nullopt;  // completed through the overflow path meanwhile
  held_bytes_ -= it->second.held_bytes;
  std::optional<Pending> failed = std::move(it->second);
  in_flight_.erase(it);
  return failed;
}

// Over the hold budget: the tensors are not held. Their memory is marked in use on the check's
// stream, so the caching allocator waits for the check before reusing it.
void DeviceChecks::markInUse(const RoleTensors& tensors, const c10::Stream& stream) {
  c10::impl::VirtualGuardImpl guard(c10::DeviceType::CUDA);
  for (const auto& [role, t] : tensors) {
    if (t.has_storage() && t.is_cuda()) guard.recordDataPtrOnStream(t.storage().data_ptr(), stream);
  }
}

void DeviceChecks::complete(uint64_t token, const HealthCounts* counts, int n) {
  Pending pending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = in_flight_.find(token);
    if (it == in_flight_.end()) return;
    InFlight::node_type node = in_flight_.extract(it);
    pending = std::move(node.mapped());
    held_bytes_ -= pending.held_bytes;
    if (free_nodes_.size() < static_cast<size_t>(kSlotsPerDevice)) free_nodes_.push_back(std::move(node));
  }
  if (pending.measured) {
    std::array<Counts, kMaxMeasured> measured{};
    n = std::min(n, kMaxMeasured);
    for (int i = 0; i < n; ++i) {
      measured[static_cast<size_t>(i)] = {static_cast<int64_t>(counts[i].nan), static_cast<int64_t>(counts[i].posinf),
                                          static_cast<int64_t>(counts[i].neginf), counts[i].max_abs};
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
  recordCheckedCall(pending.rec, pending.held, pending.args);
}

}  // namespace nanprov
