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
// Dense checks are the gradient sentinel's (a few a step) and the trail's (one per module call):
// fewer and larger slots than the fused checks' (about 6 KB each, device and mapped memory).
constexpr int kDenseSlots = 256;
constexpr int64_t kPollEvery = 8;  // calls between polls for finished checks
// How long exit waits for checks still in flight (NANPROV_EXIT_WAIT_SECONDS).
constexpr int64_t kDefaultExitWaitSeconds = 30;
// Default hold budget: enough for a few calls of a large model in flight.
constexpr int64_t kDefaultHoldBytes = int64_t{2} << 30;

static_assert(DeviceChecks::kMaxMeasured <= kernels::kMaxTensors && DeviceChecks::kMaxMeasuredDense <= kernels::kMaxDense);

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

struct DeviceChecks::Lane {
  int device = -1;
  HealthCheckQueue* queue = nullptr;
  std::vector<Pending> pending;     // by slot: written by the owner before it publishes the slot
  // Dense checks: a second queue, made by the owner at its first dense check (collectors load it).
  std::atomic<HealthCheckQueue*> dense{nullptr};
  std::vector<Measuring> measuring;  // by the dense queue's slot, as `pending`
  bool dense_failed = false;         // owner only: no dense queue, or its launch failed
  int64_t measures = 0;              // owner only
  int64_t submits = 0;              // owner only
  std::atomic<bool> owned{true};    // false once the owning thread ended
};

namespace {

std::atomic<uint64_t> g_next_checks_id{1};

// The lanes this thread owns, by device. Released (for adoption) when the thread ends.
struct ThreadLanes {
  uint64_t owner = 0;  // the DeviceChecks they belong to
  std::array<std::atomic<bool>*, DeviceChecks::kMaxDevices> owned{};
  std::array<void*, DeviceChecks::kMaxDevices> lanes{};
  ~ThreadLanes() {
    for (std::atomic<bool>* o : owned) {
      if (o) o->store(false, std::memory_order_release);
    }
  }
};
thread_local ThreadLanes t_lanes;

}  // namespace

DeviceChecks::DeviceChecks()
    : id_(g_next_checks_id.fetch_add(1)), budget_(envInteger("NANPROV_HOLD_BYTES", kDefaultHoldBytes, 0)) {}

void DeviceChecks::recordMeasuredSynchronously(CallEvent rec, const RoleTensors& tensors, const CallArgs& args) {
  for (const auto& [role, t] : tensors) rec.tensors.push_back(measureTensor(t, role));
  sync_measures_ += static_cast<int64_t>(tensors.size());
  recordCheckedCall(std::move(rec), tensors, args);
}

void DeviceChecks::submit(CallEvent rec, const RoleTensors& tensors, const CallArgs& args) {
  ProbeCost::Scope cost(ProbeStage::kSubmitting);
  if (tensors.empty()) {
    probes().session().record(rec);
    return;
  }
  const int device = rec.device.index;  // finish() found it; -1 on the CPU
  if (device < 0) {
    recordMeasuredSynchronously(std::move(rec), tensors, args);
    return;
  }
  c10::Stream stream = currentStream(device);
  // Inside a graph being captured the check is captured too, and runs at every replay
  // (GraphChecks); nothing may be measured on the host there, nor a queue made.
  const bool in_graph = capturing(stream);
  Lane* lane = in_graph ? nullptr : laneFor(device);
  if (!in_graph && !lane) {
    recordMeasuredSynchronously(std::move(rec), tensors, args);
    return;
  }
  // Earlier checks of this thread that finished meanwhile, every few calls, or every lane's when
  // the held tensors near the budget. Never waits, for the GPU or for another collector.
  if (lane && held_bytes_.load(std::memory_order_relaxed) > budget_ / 2) {
    ProbeCost::Scope collecting(ProbeStage::kCollecting);
    collect(false);
  } else if (lane && ++lane->submits % kPollEvery == 0) {
    ProbeCost::Scope collecting(ProbeStage::kCollecting);
    collectLane(*lane, false);
  }

  Pending pending;
  Views views;
  for (const auto& [role, t] : tensors) {
    std::optional<TensorView> view =
        t.is_cuda() && t.device().index() == device ? viewOf(t, role == Role::kMask) : std::nullopt;
    if (!view || views.size() == views.capacity()) {  // rare: float64, more than 6 dims
      if (in_graph) {  // the host cannot measure it there
        probes().session().callBegun(-1);
        probes().session().countUnprobed("attention captured into a CUDA graph with a tensor the check cannot read");
        return;
      }
      rec.tensors.push_back(measureTensor(t, role));
      ++sync_measures_;
      continue;
    }
    pending.checked.push_back(static_cast<uint8_t>(rec.tensors.size()));
    rec.tensors.push_back(describeTensor(t, role));
    views.push_back(*view);
  }
  if (in_graph) {
    probes().session().callBegun(-1);  // this call did not run: its graph's replays are the calls
    std::string why = views.empty() ? "attention captured into a CUDA graph with no tensor to check"
                                     : graphs_.capture(rec, pending.checked, views.data(), static_cast<int>(views.size()),
                                                       device, stream.native_handle());
    if (!why.empty()) {
      logOnce("graph capture", why + ": not checked");
      probes().session().countUnprobed(why);
    }
    return;
  }
  pending.rec = std::move(rec);
  if (views.empty()) {
    recordCheckedCall(std::move(pending.rec), tensors, args);
    return;
  }
  if (GraphChecks::inGraphPool()) {
    pending.missing = "its tensors live in a CUDA graph's memory pool (torch.compile's cudagraph warm-up), never held";
  } else {
    pending.args = args;  // IValues that may hold tensors, held as the tensors are
  }
  std::optional<Pending> failed = enqueue(*lane, std::move(pending), views, stream, &tensors);
  if (failed) {
    failed->rec.tensors.clear();
    recordMeasuredSynchronously(std::move(failed->rec), tensors, failed->args);
  }
}

void DeviceChecks::graphCaptureBegan(int64_t key) {
  c10::impl::VirtualGuardImpl guard(c10::DeviceType::CUDA);
  graphs_.captureBegan(key, currentStream(guard.getDevice().index()).native_handle());
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
  Lane* lane = device < 0 || tensors.size() > kMaxMeasuredDense ? nullptr : laneFor(device);
  if (lane && ++lane->measures % kPollEvery == 0) {  // as submit() does: finished checks free their slots
    ProbeCost::Scope collecting(ProbeStage::kCollecting);
    collectLane(*lane, false);
  }
  if (lane && enqueueDense(*lane, tensors, done, context, *stream)) return true;
  if (tensors.size() > kMaxMeasured) lane = nullptr;
  Views views;
  for (const at::Tensor& t : tensors) {
    std::optional<TensorView> view = t.is_cuda() && t.device().index() == device ? viewOf(t, false) : std::nullopt;
    if (!view) break;
    views.push_back(*view);
  }
  if (!lane || !stream || views.size() != tensors.size()) {  // rare: float64, no queue on the device
    measureOnHost(tensors, done, context);
    return true;
  }
  Pending pending;
  pending.measured = done;
  pending.context = context;
  if (enqueue(*lane, std::move(pending), views, *stream)) measureOnHost(tensors, done, context);
  else measured_fused_launches_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool DeviceChecks::denseCheckable(const at::Tensor& t) {
  const auto type = elementType(t.scalar_type());
  return t.is_cuda() && t.has_storage() && t.is_contiguous() && t.numel() < (int64_t{1} << 56) && type &&
         *type != kernels::ElementType::kBool;
}

int DeviceChecks::denseBatch(int device) {
  Lane* lane = device >= 0 ? laneFor(device) : nullptr;
  return lane && !lane->dense_failed ? kMaxMeasuredDense : kMaxMeasured;
}

bool DeviceChecks::enqueueDense(Lane& lane, const std::vector<at::Tensor>& tensors, Measured done, uint64_t context,
                                const c10::Stream& stream) {
#if NANPROV_HAVE_CUDA
  if (tensors.empty() || lane.dense_failed) return false;
  InlineVector<kernels::DenseTensor, kernels::kMaxDense> dense;
  for (const at::Tensor& t : tensors) {
    if (!denseCheckable(t) || t.device().index() != lane.device) return false;
    dense.push_back(kernels::DenseTensor::of(t.data_ptr(), t.numel(), *elementType(t.scalar_type())));
  }
  HealthCheckQueue* queue = lane.dense.load(std::memory_order_acquire);
  if (!queue) {
    auto created = HealthCheckQueue::create(lane.device, kDenseSlots, kernels::CheckKind::kDense);
    if (!created.ok()) {
      lane.dense_failed = true;
      logOnce("dense queue", "dense checks unavailable on cuda:" + std::to_string(lane.device) +
                                 ", gradients and parameters are checked twelve to a launch: " + created.status().message());
      return false;
    }
    lane.measuring.resize(static_cast<size_t>(created.value()->slots()));
    queue = created->release();  // leaked with the lane: checks may be in flight at exit
    lane.dense.store(queue, std::memory_order_release);
  }
  const int slot = queue->reserve(denseReadyFor(lane));
  lane.measuring[static_cast<size_t>(slot)] = {done, context};
  Status st = queue->submitDense(dense.data(), static_cast<int>(dense.size()), stream.native_handle(),
                                 static_cast<uint64_t>(slot));
  if (st.ok()) {
    dense_launches_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  // Not retried: a launch that fails once (no kernel image for this GPU, say) fails every time.
  // From the next batch on the sentinel batches twelve (denseBatch); this one is measured apart.
  lane.dense_failed = true;
  logOnce("dense check", "dense check failed; gradients and parameters are checked twelve to a launch from now on: " +
                             st.message());
  return false;
#else
  (void)lane, (void)tensors, (void)done, (void)context, (void)stream;
  return false;
#endif
}

// Step boundaries: every lane's finished checks, taking its turn behind a collector already at
// a lane (which may be recording a call), but never waiting for the GPU.
void DeviceChecks::poll() {
  collect(true);
  graphs_.collect();
}

void DeviceChecks::drain() {
#if NANPROV_HAVE_CUDA
  // Exit never hangs on the GPU: a stream stuck behind a hung kernel or collective (a dead peer)
  // would otherwise keep a process that was meant to end waiting forever.
  static const int64_t seconds = envInteger("NANPROV_EXIT_WAIT_SECONDS", kDefaultExitWaitSeconds, 0);
  const auto deadline = HealthCheckQueue::Clock::now() + std::chrono::seconds(seconds);
  int unfinished = 0;
  forEachLane([&](Lane& lane) {
    lane.queue->drain(readyFor(lane), deadline, &unfinished);
    if (HealthCheckQueue* dense = lane.dense.load(std::memory_order_acquire)) {
      dense->drain(denseReadyFor(lane), deadline, &unfinished);
    }
  });
  graphs_.collect(deadline, &unfinished);
  if (unfinished > 0) {
    logOnce("exit wait", std::to_string(unfinished) + " checks had not finished " + std::to_string(seconds) +
                             " s after the run ended (a GPU stream still busy, or stuck behind a hung kernel or "
                             "collective): their calls are not recorded. NANPROV_EXIT_WAIT_SECONDS sets the wait");
  }
#endif
}

template <typename Fn>
void DeviceChecks::forEachLane(Fn&& fn) const {
  for (int i = 0; i < lane_count_.load(std::memory_order_acquire); ++i) {
    if (Lane* lane = lanes_[i].load(std::memory_order_acquire)) fn(*lane);
  }
}

int DeviceChecks::firstDevice() const {
  int first = -1;
  forEachLane([&](const Lane& lane) {
    if (first < 0 || lane.device < first) first = lane.device;
  });
  return first;
}

int64_t DeviceChecks::hostSyncs() const {
  int64_t n = sync_measures_.load();
#if NANPROV_HAVE_CUDA
  forEachLane([&](const Lane& lane) {
    n += lane.queue->forcedWaits();
    if (const HealthCheckQueue* dense = lane.dense.load(std::memory_order_acquire)) n += dense->forcedWaits();
  });
#endif
  return n;
}

void DeviceChecks::collect(bool patient) {
  forEachLane([&](Lane& lane) { collectLane(lane, patient); });
}

void DeviceChecks::collectLane(Lane& lane, bool patient) {
#if NANPROV_HAVE_CUDA
  lane.queue->collect(readyFor(lane), patient);
  if (HealthCheckQueue* dense = lane.dense.load(std::memory_order_acquire)) dense->collect(denseReadyFor(lane), patient);
#else
  (void)lane, (void)patient;
#endif
}

// This thread's lane on `device`, made (or adopted) at its first check there. nullptr when no
// queue can be made on the device: its checks are then measured on the host.
DeviceChecks::Lane* DeviceChecks::laneFor(int device) {
#if NANPROV_HAVE_CUDA
  if (device < 0 || device >= kMaxDevices) return nullptr;
  if (t_lanes.owner == id_) {
    if (void* lane = t_lanes.lanes[static_cast<size_t>(device)]) return static_cast<Lane*>(lane);
  } else {
    t_lanes = {};  // an earlier session's lanes (a restarted session in one process)
    t_lanes.owner = id_;
  }
  Lane* lane = adoptLane(device);
  if (lane) {
    t_lanes.lanes[static_cast<size_t>(device)] = lane;
    t_lanes.owned[static_cast<size_t>(device)] = &lane->owned;
  }
  return lane;
#else
  logOnce("no fused checks", "nanprov was built without the CUDA toolkit: CUDA tensors are measured on the host");
  (void)device;
  return nullptr;
#endif
}

DeviceChecks::Lane* DeviceChecks::adoptLane(int device) {
#if NANPROV_HAVE_CUDA
  std::lock_guard<std::mutex> lock(create_mu_);
  // A lane whose thread ended: its queue has one producer again, this thread.
  for (int i = 0; i < lane_count_.load(std::memory_order_acquire); ++i) {
    Lane* lane = lanes_[i].load(std::memory_order_acquire);
    bool unowned = false;
    if (lane->device == device && lane->owned.compare_exchange_strong(unowned, true)) return lane;
  }
  if (failed_[device]) return nullptr;
  const int index = lane_count_.load(std::memory_order_relaxed);
  if (index == kMaxLanes) {
    logOnce("device lanes", "more than " + std::to_string(kMaxLanes) + " threads ran checked CUDA calls at once: "
                                "the others are measured on the host (slower)");
    return nullptr;
  }
  auto created = HealthCheckQueue::create(device, kSlotsPerDevice);
  if (!created.ok()) {
    failed_[device] = true;
    logOnce("device queue", "fused health checks unavailable on cuda:" + std::to_string(device) +
                                ", measuring on the host (slower): " + created.status().message());
    return nullptr;
  }
  auto* lane = new Lane();  // leaked: checks may be in flight at exit
  lane->device = device;
  lane->queue = created->release();
  lane->pending.resize(static_cast<size_t>(lane->queue->slots()));
  lanes_[index].store(lane, std::memory_order_release);
  lane_count_.store(index + 1, std::memory_order_release);
  return lane;
#else
  (void)device;
  return nullptr;
#endif
}

std::optional<DeviceChecks::Pending> DeviceChecks::enqueue(Lane& lane, Pending pending, const Views& views,
                                                           const c10::Stream& stream, const RoleTensors* tensors) {
  bool held = true;
  if (tensors) {
    int64_t bytes = 0;
    for (const auto& [role, t] : *tensors) bytes += static_cast<int64_t>(t.nbytes());
    // In a CUDA graph's memory pool a held tensor would be an allocation the graph's owner does
    // not expect (GraphChecks::inGraphPool): marked in use instead, as past the budget.
    held = !GraphChecks::inGraphPool() && held_bytes_.fetch_add(bytes, std::memory_order_relaxed) + bytes <= budget_;
    if (held) {
      pending.held_bytes = bytes;
      pending.held = *tensors;
    } else {
      if (!GraphChecks::inGraphPool()) held_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
      markInUse(*tensors, stream);
    }
  }
  Status st = Status::Ok();
#if NANPROV_HAVE_CUDA
  const int slot = lane.queue->reserve(readyFor(lane));
  lane.pending[static_cast<size_t>(slot)] = std::move(pending);
  {
    // An attention call's launch; the sentinel's and the trail's count in their own stages.
    std::optional<ProbeCost::Scope> cost;
    if (tensors) cost.emplace(ProbeStage::kLaunching);
    st = lane.queue->submit(views.data(), static_cast<int>(views.size()), stream.native_handle(), static_cast<uint64_t>(slot));
  }
  if (!st.ok()) pending = std::move(lane.pending[static_cast<size_t>(slot)]);  // never published
#else
  (void)lane, (void)views, (void)stream;
  st = Status::Error("built without the CUDA toolkit");
#endif
  if (st.ok()) return std::nullopt;
  logOnce("device check", "fused health check failed, measuring on the host instead: " + st.message());
  held_bytes_.fetch_sub(pending.held_bytes, std::memory_order_relaxed);
  return pending;
}

// Over the hold budget: the tensors are not held. Their memory is marked in use on the check's
// stream, so the caching allocator waits for the check before reusing it.
void DeviceChecks::markInUse(const RoleTensors& tensors, const c10::Stream& stream) {
  c10::impl::VirtualGuardImpl guard(c10::DeviceType::CUDA);
  for (const auto& [role, t] : tensors) {
    if (t.has_storage() && t.is_cuda()) guard.recordDataPtrOnStream(t.storage().data_ptr(), stream);
  }
}

// The capture fits in std::function's own storage: no allocation.
std::function<void(uint64_t, const HealthCounts*, int)> DeviceChecks::readyFor(Lane& lane) {
  return [this, &lane](uint64_t slot, const HealthCounts* c, int n) { complete(lane, slot, c, n); };
}

std::function<void(uint64_t, const HealthCounts*, int)> DeviceChecks::denseReadyFor(Lane& lane) {
  return [&lane](uint64_t slot, const HealthCounts* c, int n) {
    const Measuring m = lane.measuring[slot];
    handOver(m.done, m.context, c, n);
  };
}

// The counts a measure() caller is handed, from the kernel's results.
void DeviceChecks::handOver(Measured done, uint64_t context, const HealthCounts* counts, int n) {
  std::array<Counts, kMaxMeasuredDense> measured{};
  n = std::min(n, kMaxMeasuredDense);
  for (int i = 0; i < n; ++i) {
    measured[static_cast<size_t>(i)] = {static_cast<int64_t>(counts[i].nan), static_cast<int64_t>(counts[i].posinf),
                                        static_cast<int64_t>(counts[i].neginf), counts[i].max_abs};
  }
  done(context, measured.data(), n);
}

void takeCounts(CallEvent& rec, const GraphChecks::Checked& checked, const HealthCounts* counts, int n) {
  for (int i = 0; i < n; ++i) {
    TensorHealth& h = rec.tensors[checked[static_cast<size_t>(i)]];
    const HealthCounts& c = counts[i];
    h.nan = static_cast<int64_t>(c.nan);
    h.posinf = static_cast<int64_t>(c.posinf);
    h.neginf = static_cast<int64_t>(c.neginf);
    h.max_abs = c.max_abs;
    h.all_zero = h.numel > 0 && c.nonzero == 0;
    if (h.role == Role::kMask) h.masked_rows = static_cast<int64_t>(c.masked_rows);
  }
}

void DeviceChecks::complete(Lane& lane, uint64_t slot, const HealthCounts* counts, int n) {
  Pending pending = std::move(lane.pending[slot]);
  held_bytes_.fetch_sub(pending.held_bytes, std::memory_order_relaxed);
  if (pending.measured) {
    handOver(pending.measured, pending.context, counts, n);
    return;
  }
  if (n != static_cast<int>(pending.checked.size())) {
    logOnce("device check result", "a fused health check failed on the device; its call is not recorded");
    release(pending);
    return;
  }
  takeCounts(pending.rec, pending.checked, counts, n);
  recordCheckedCall(std::move(pending.rec), pending.held, pending.args, pending.missing);
  release(pending);
}

namespace {

// How many storages dropping `held` frees: those whose every tensor is referenced only by `held`
// (a role may repeat one, as self-attention's q = k = v), with no other tensor on them. At most
// kMaxCallTensors entries, so pairwise passes over small arrays, no allocation.
int64_t lastReferences(const RoleTensors& held) {
  const size_t n = std::min(held.size(), kMaxCallTensors);
  std::array<const c10::TensorImpl*, kMaxCallTensors> impl{};
  std::array<const c10::StorageImpl*, kMaxCallTensors> storage{};
  for (size_t i = 0; i < n; ++i) {
    const at::Tensor& t = held[i].second;
    impl[i] = t.unsafeGetTensorImpl();
    storage[i] = t.defined() && t.has_storage() ? t.storage().unsafeGetStorageImpl() : nullptr;
  }
  int64_t freed = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!storage[i] || std::find(storage.begin(), storage.begin() + i, storage[i]) != storage.begin() + i) continue;
    size_t tensors = 0;  // distinct tensors on this storage
    bool only_held = true;
    for (size_t j = i; j < n; ++j) {
      if (storage[j] != storage[i] || std::find(impl.begin() + i, impl.begin() + j, impl[j]) != impl.begin() + j) continue;
      ++tensors;
      const auto refs = static_cast<size_t>(std::count(impl.begin() + j, impl.begin() + n, impl[j]));
      only_held = only_held && static_cast<size_t>(held[j].second.use_count()) == refs;
    }
    freed += only_held && static_cast<size_t>(held[i].second.storage().use_count()) == tensors;
  }
  return freed;
}

}  // namespace

// Where nanprov held the last reference (a backward's dQ, dK, dV once autograd is done with
// them), dropping it is the caching allocator's free: timed apart, as it is the user's cost moved.
void DeviceChecks::release(Pending& pending) {
  ProbeCost::Scope cost(ProbeStage::kReleasing);
  released_.fetch_add(static_cast<int64_t>(pending.held.size()), std::memory_order_relaxed);
  released_last_.fetch_add(lastReferences(pending.held), std::memory_order_relaxed);
  pending.held.clear();
  pending.args.clear();  // IValues that may hold tensors too (a backward's philox seed and offset)
}

}  // namespace nanprov
