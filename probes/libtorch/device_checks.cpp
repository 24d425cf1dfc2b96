#include "probes/libtorch/device_checks.h"

#include <ATen/ATen.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <thread>

#include "base/env.h"
#include "base/log_once.h"
#include "base/records/roles.h"
#include "probes/core/probe_cost.h"
#include "probes/core/session.h"
#include "probes/libtorch/device_queue.h"

namespace nanprov {
namespace {

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
  if (!deviceReads(v)) return std::nullopt;
  return v;
}

c10::Stream currentStream(int device) {
  c10::impl::VirtualGuardImpl guard(c10::DeviceType::CUDA);
  return guard.getStream(c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device)));
}

bool capturing(const c10::Stream& stream) { return streamCapturing(stream.native_handle()); }

}  // namespace

struct DeviceChecks::Lane {
  int device = -1;
  DeviceQueue* queue = nullptr;
  std::vector<Pending> pending;     // by slot: written by the owner before it publishes the slot
  // A batched launch's calls: kMaxBatchCalls per slot, as `pending`; made at the first one.
  std::vector<Pending> parts;
  // Dense checks: a second queue, made by the owner at its first dense check (collectors load it).
  std::atomic<DeviceQueue*> dense{nullptr};
  std::vector<Measuring> measuring;  // by the dense queue's slot, as `pending`
  bool dense_failed = false;         // owner only: no dense queue, or its launch failed
  int64_t measures = 0;              // owner only
  int64_t submits = 0;              // owner only
  std::atomic<bool> owned{true};    // false once the owning thread ended
};

struct DeviceChecks::Batch {
  int device = -1;  // -1: the CPU
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

namespace {

std::atomic<uint64_t> g_next_checks_id{1};

// The lanes this thread owns, by device. Released (for adoption) when the thread ends.
struct ThreadLanes {
  uint64_t owner = 0;  // the DeviceChecks they belong to
  std::array<std::atomic<bool>*, DeviceChecks::kMaxDevices> owned{};
  std::array<void*, DeviceChecks::kMaxDevices> lanes{};
  // Deferred calls' batches, by device + 1 (0: the CPU), and their owned flags.
  std::array<std::atomic<bool>*, DeviceChecks::kMaxDevices + 1> batch_owned{};
  std::array<void*, DeviceChecks::kMaxDevices + 1> batches{};
  ~ThreadLanes() {
    for (std::atomic<bool>* o : owned) {
      if (o) o->store(false, std::memory_order_release);
    }
    for (std::atomic<bool>* o : batch_owned) {
      if (o) o->store(false, std::memory_order_release);
    }
  }
};
thread_local ThreadLanes t_lanes;

// This thread's lanes and batches of the DeviceChecks `id`: an earlier session's are forgotten (a
// restarted session in one process).
ThreadLanes& threadLanes(uint64_t id) {
  if (t_lanes.owner != id) {
    t_lanes = {};
    t_lanes.owner = id;
  }
  return t_lanes;
}

uint32_t versionOf(const at::Tensor& t) { return t.unsafeGetTensorImpl()->version_counter().current_version(); }

constexpr const char* kModifiedUnprobed =
    "attention tensors changed in place before their deferred check (left out of it; the call is judged on the rest)";

}  // namespace

DeviceChecks::DeviceChecks(Session& session, KernelTracer& tracer, CheckedCallSink& sink)
    : id_(g_next_checks_id.fetch_add(1)),
      session_(session),
      sink_(sink),
      graphs_(session, tracer, sink),
      budget_(envInteger("NANPROV_HOLD_BYTES", kDefaultHoldBytes, 0)),
      defer_(static_cast<int>(std::min<int64_t>(envInteger("NANPROV_DEFER_CHECKS", 0, 0), 2))) {}

void DeviceChecks::recordMeasuredSynchronously(CallEvent rec, const RoleTensors& tensors, const CallArgs& args) {
  for (const auto& [role, t] : tensors) rec.tensors.push_back(measureTensor(t, role));
  sync_measures_ += static_cast<int64_t>(tensors.size());
  sink_.record(std::move(rec), tensors, args);
}

void DeviceChecks::submit(CallEvent rec, const RoleTensors& tensors, const CallArgs& args) {
  ProbeCost::Scope cost(ProbeStage::kSubmitting);
  if (tensors.empty()) {
    session_.record(rec);
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
    flushDeferred();  // deferred calls hold tensors too: checked now, they can be released soon
    collect(false);
  } else if (lane && ++lane->submits % kPollEvery == 0) {
    ProbeCost::Scope collecting(ProbeStage::kCollecting);
    collectLane(*lane, false);
  }

  // Inside a graph capture the check must be captured with the call; in a torch.compile'd graph
  // Inductor may reuse the call's buffers with writes no version counter sees: both at once.
  if (lane && !rec.compiled && defer(rec, tensors, args, device, stream)) return;

  Pending pending;
  Views views;
  bool unreadable_in_graph = false;
  for (const auto& [role, t] : tensors) {
    std::optional<TensorView> view =
        t.is_cuda() && t.device().index() == device ? viewOf(t, holdsMaskedRows(role)) : std::nullopt;
    if (!view || views.size() == views.capacity()) {  // rare: float64, more than 6 dims
      if (in_graph) {  // the host cannot measure it there
        unreadable_in_graph = true;
        break;
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
    session_.callBegun(-1);  // this call did not run: its graph's replays are the calls
    std::string why = unreadable_in_graph ? "attention captured into a CUDA graph with a tensor the check cannot read"
                      : views.empty()     ? "attention captured into a CUDA graph with no tensor to check"
                                          : graphs_.capture(rec, pending.checked, views.data(),
                                                            static_cast<int>(views.size()), device, stream.native_handle());
    if (!why.empty()) {
      logOnce("graph capture", why + ": not checked");
      session_.countUnprobed(why);
    }
    return;
  }
  pending.rec = std::move(rec);
  if (views.empty()) {
    sink_.record(std::move(pending.rec), tensors, args);
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

void DeviceChecks::submitHost(CallEvent rec, const RoleTensors& tensors, const CallArgs& args) {
  if (!rec.compiled && defer(rec, tensors, args, -1, std::nullopt)) return;
  for (const auto& [role, t] : tensors) rec.tensors.push_back(measureTensor(t, role));
  sink_.record(std::move(rec), tensors, args);
}

bool DeviceChecks::defer(CallEvent& rec, const RoleTensors& tensors, const CallArgs& args, int device,
                         const std::optional<c10::Stream>& stream) {
  // Not held in a CUDA graph's pool (GraphChecks::inGraphPool): memory not held may be reused by
  // later kernels before a deferred check ran, so those calls stay immediate (marked in use).
  if (defer_ < (device < 0 ? 2 : 1) || tensors.empty() || tensors.size() > kMaxCallTensors || GraphChecks::inGraphPool()) return false;
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
  if (held_bytes_.fetch_add(bytes, std::memory_order_relaxed) + bytes > budget_) {
    held_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
    return false;
  }
  Batch* batch = batchFor(device);
  if (!batch) {
    held_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
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
  if (!batch->calls.empty() && (batch->views + n > kernels::kMaxTensors ||
                                static_cast<int>(batch->calls.size()) == kMaxBatchCalls || batch->stream != stream)) {
    // The batch's stream capturing a CUDA graph now (another stream's call came meanwhile): no
    // launch may go there until it ends, so the batch waits and this call is checked at once.
    if (batch->stream && capturing(*batch->stream)) {
      batch->release();
      held_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
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

void DeviceChecks::flushDeferred() {
  for (int i = 0; i < batch_count_.load(std::memory_order_acquire); ++i) {
    Batch* batch = batches_[static_cast<size_t>(i)].load(std::memory_order_acquire);
    if (!batch) continue;
    batch->claim();
    // Never into a graph being captured on the batch's stream: those calls wait for a later flush.
    if (!batch->calls.empty() && !(batch->stream && capturing(*batch->stream))) {
      flushCalls(batch->device, batch->stream, batch->calls);
      batch->views = 0;
    }
    batch->release();
  }
}

void DeviceChecks::flushCalls(int device, const std::optional<c10::Stream>& stream, std::vector<Deferred>& calls) {
  // On CUDA the batch's one check goes into a slot of this thread's lane (on the calls' stream),
  // each call's Pending into that slot's parts.
  Lane* lane = device >= 0 && stream ? laneFor(device) : nullptr;
  int slot = -1;
  Pending* parts = nullptr;
  if (lane) {
    slot = lane->queue->reserve(readyFor(*lane));
    if (lane->parts.empty()) {
      // Made once, at the lane's first batched launch, never resized: kMaxBatchCalls Pendings a
      // slot (a few MB), so a batched launch allocates nothing.
      lane->parts.resize(lane->pending.size() * kMaxBatchCalls);
    }
    parts = &lane->parts[static_cast<size_t>(slot) * kMaxBatchCalls];
  }
  int batched = 0;
  int64_t batched_bytes = 0;
  Views views;
  for (Deferred& d : calls) {
    Pending p;
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
      held_bytes_.fetch_sub(d.held_bytes, std::memory_order_relaxed);
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
  Pending launch;  // the batch's one check; its calls are the slot's parts
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
    parts[i] = Pending();
  }
}

// A deferred call whose batched check cannot run: its held tensors measured on the host instead
// (a counted host synchronisation), its hold released.
void DeviceChecks::measureHeldOnHost(Pending& p) {
  held_bytes_.fetch_sub(p.held_bytes, std::memory_order_relaxed);
  p.rec.tensors.clear();
  recordMeasuredSynchronously(std::move(p.rec), p.held, p.args);
}

// The signature a changed tensor sends back to immediate checks: the same op and backend, in the
// same phase of the same layer, is where the same in-place change will come again.
DeviceChecks::Signature DeviceChecks::signatureOf(const CallEvent& rec) {
  return {rec.op, rec.backend, static_cast<int>(rec.phase), rec.layer};
}

bool DeviceChecks::fellBack(const CallEvent& rec) {
  if (fallback_count_.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard<std::mutex> lock(fallback_mu_);
  return std::find(fallbacks_.begin(), fallbacks_.end(), signatureOf(rec)) != fallbacks_.end();
}

void DeviceChecks::fallBack(const CallEvent& rec) {
  const Signature key = signatureOf(rec);
  std::lock_guard<std::mutex> lock(fallback_mu_);
  if (std::find(fallbacks_.begin(), fallbacks_.end(), key) != fallbacks_.end()) return;
  fallbacks_.push_back(key);
  fallback_count_.store(static_cast<int>(fallbacks_.size()), std::memory_order_release);
}

DeviceChecks::DeferStats DeviceChecks::deferStats() const {
  return {deferred_.load(std::memory_order_relaxed), batched_launches_.load(std::memory_order_relaxed),
          immediate_fallbacks_.load(std::memory_order_relaxed), modified_.load(std::memory_order_relaxed)};
}

// This thread's batch for `device` (-1: the CPU), made (or adopted from an ended thread) at its
// first deferred call there. nullptr past kMaxLanes batches: those calls are checked at once.
DeviceChecks::Batch* DeviceChecks::batchFor(int device) {
  if (device < -1 || device >= kMaxDevices) return nullptr;
  ThreadLanes& mine = threadLanes(id_);
  const auto at = static_cast<size_t>(device + 1);
  if (void* batch = mine.batches[at]) return static_cast<Batch*>(batch);
  Batch* batch = nullptr;
  {
    std::lock_guard<std::mutex> lock(create_mu_);
    for (int i = 0; i < batch_count_.load(std::memory_order_acquire) && !batch; ++i) {
      Batch* b = batches_[static_cast<size_t>(i)].load(std::memory_order_acquire);
      bool unowned = false;
      if (b->device == device && b->owned.compare_exchange_strong(unowned, true)) batch = b;
    }
    const int index = batch_count_.load(std::memory_order_relaxed);
    if (!batch && index < kMaxLanes) {
      batch = new Batch();  // leaked, as lanes are: a flush may be reading it at exit
      batch->device = device;
      batches_[static_cast<size_t>(index)].store(batch, std::memory_order_release);
      batch_count_.store(index + 1, std::memory_order_release);
    }
  }
  if (batch) {
    mine.batches[at] = batch;
    mine.batch_owned[at] = &batch->owned;
  }
  return batch;
}

void DeviceChecks::graphCaptureBegan(int64_t key) {
  c10::impl::VirtualGuardImpl guard(c10::DeviceType::CUDA);
  graphs_.captureBegan(key, currentStream(guard.getDevice().index()).native_handle());
}

void DeviceChecks::measureOnHost(const std::vector<at::Tensor>& tensors, MeasuredSink& sink, uint64_t context) {
  std::vector<Counts> counts(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    TensorHealth h = measureValues(tensors[i]);
    counts[i] = {h.nan, h.posinf, h.neginf, h.max_abs};
  }
  sync_measures_ += static_cast<int64_t>(tensors.size());
  sink.receive(context, counts.data(), static_cast<int>(counts.size()));
}

bool DeviceChecks::measure(const std::vector<at::Tensor>& tensors, MeasuredSink& sink, uint64_t context) {
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
  if (lane && enqueueDense(*lane, tensors, sink, context, *stream)) return true;
  if (tensors.size() > kMaxMeasured) lane = nullptr;
  Views views;
  for (const at::Tensor& t : tensors) {
    std::optional<TensorView> view = t.is_cuda() && t.device().index() == device ? viewOf(t, false) : std::nullopt;
    if (!view) break;
    views.push_back(*view);
  }
  if (!lane || !stream || views.size() != tensors.size()) {  // rare: float64, no queue on the device
    measureOnHost(tensors, sink, context);
    return true;
  }
  Pending pending;
  pending.measured = &sink;
  pending.context = context;
  if (enqueue(*lane, std::move(pending), views, *stream)) measureOnHost(tensors, sink, context);
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

bool DeviceChecks::enqueueDense(Lane& lane, const std::vector<at::Tensor>& tensors, MeasuredSink& sink, uint64_t context,
                                const c10::Stream& stream) {
  if (tensors.empty() || lane.dense_failed) return false;
  InlineVector<kernels::DenseTensor, kernels::kMaxDense> dense;
  for (const at::Tensor& t : tensors) {
    if (!denseCheckable(t) || t.device().index() != lane.device) return false;
    dense.push_back(kernels::DenseTensor::of(t.data_ptr(), t.numel(), *elementType(t.scalar_type())));
  }
  DeviceQueue* queue = lane.dense.load(std::memory_order_acquire);
  if (!queue) {
    auto created = DeviceQueue::create(lane.device, kDenseSlots, kernels::CheckKind::kDense);
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
  lane.measuring[static_cast<size_t>(slot)] = {&sink, context};
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
}

// Step boundaries: every lane's finished checks, taking its turn behind a collector already at
// a lane (which may be recording a call), but never waiting for the GPU.
void DeviceChecks::poll() {
  flushDeferred();
  collect(true);
  graphs_.poll();
}

void DeviceChecks::drain() {
  flushDeferred();
  // Exit never hangs on the GPU: a stream stuck behind a hung kernel or collective (a dead peer)
  // would otherwise keep a process that was meant to end waiting forever.
  static const int64_t seconds = envInteger("NANPROV_EXIT_WAIT_SECONDS", kDefaultExitWaitSeconds, 0);
  const auto deadline = DeviceQueue::Clock::now() + std::chrono::seconds(seconds);
  int unfinished = 0;
  forEachLane([&](Lane& lane) {
    lane.queue->drain(readyFor(lane), deadline, &unfinished);
    if (DeviceQueue* dense = lane.dense.load(std::memory_order_acquire)) {
      dense->drain(denseReadyFor(lane), deadline, &unfinished);
    }
  });
  graphs_.drain(deadline, &unfinished);
  if (unfinished > 0) {
    logOnce("exit wait", std::to_string(unfinished) + " checks had not finished " + std::to_string(seconds) +
                             " s after the run ended (a GPU stream still busy, or stuck behind a hung kernel or "
                             "collective): their calls are not recorded. NANPROV_EXIT_WAIT_SECONDS sets the wait");
  }
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
  forEachLane([&](const Lane& lane) {
    n += lane.queue->forcedWaits();
    if (const DeviceQueue* dense = lane.dense.load(std::memory_order_acquire)) n += dense->forcedWaits();
  });
  return n;
}

void DeviceChecks::collect(bool patient) {
  forEachLane([&](Lane& lane) { collectLane(lane, patient); });
}

void DeviceChecks::collectLane(Lane& lane, bool patient) {
  lane.queue->collect(readyFor(lane), patient);
  if (DeviceQueue* dense = lane.dense.load(std::memory_order_acquire)) dense->collect(denseReadyFor(lane), patient);
}

// This thread's lane on `device`, made (or adopted) at its first check there. nullptr when no
// queue can be made on the device: its checks are then measured on the host.
DeviceChecks::Lane* DeviceChecks::laneFor(int device) {
  if (device < 0 || device >= kMaxDevices) return nullptr;
  if (void* lane = threadLanes(id_).lanes[static_cast<size_t>(device)]) return static_cast<Lane*>(lane);
  Lane* lane = adoptLane(device);
  if (lane) {
    t_lanes.lanes[static_cast<size_t>(device)] = lane;
    t_lanes.owned[static_cast<size_t>(device)] = &lane->owned;
  }
  return lane;
}

DeviceChecks::Lane* DeviceChecks::adoptLane(int device) {
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
  auto created = DeviceQueue::create(device, kSlotsPerDevice, kernels::CheckKind::kFused);
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
  const int slot = lane.queue->reserve(readyFor(lane));
  lane.pending[static_cast<size_t>(slot)] = std::move(pending);
  {
    // An attention call's launch; the sentinel's and the trail's count in their own stages.
    std::optional<ProbeCost::Scope> cost;
    if (tensors) cost.emplace(ProbeStage::kLaunching);
    st = lane.queue->submit(views.data(), static_cast<int>(views.size()), stream.native_handle(), static_cast<uint64_t>(slot));
  }
  if (!st.ok()) pending = std::move(lane.pending[static_cast<size_t>(slot)]);  // never published
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
    handOver(*m.sink, m.context, c, n);
  };
}

// The counts a measure() caller is handed, from the kernel's results.
void DeviceChecks::handOver(MeasuredSink& sink, uint64_t context, const HealthCounts* counts, int n) {
  std::array<Counts, kMaxMeasuredDense> measured{};
  n = std::min(n, kMaxMeasuredDense);
  for (int i = 0; i < n; ++i) {
    measured[static_cast<size_t>(i)] = {static_cast<int64_t>(counts[i].nan), static_cast<int64_t>(counts[i].posinf),
                                        static_cast<int64_t>(counts[i].neginf), counts[i].max_abs};
  }
  sink.receive(context, measured.data(), n);
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
    if (holdsMaskedRows(h.role)) h.masked_rows = static_cast<int64_t>(c.masked_rows);
  }
}

void DeviceChecks::complete(Lane& lane, uint64_t slot, const HealthCounts* counts, int n) {
  Pending pending = std::move(lane.pending[slot]);
  held_bytes_.fetch_sub(pending.held_bytes, std::memory_order_relaxed);
  if (pending.measured) {
    handOver(*pending.measured, pending.context, counts, n);
    return;
  }
  if (pending.batched > 0) {  // deferred calls checked in one launch: each its own slice
    Pending* parts = &lane.parts[slot * kMaxBatchCalls];
    size_t total = 0;
    for (int i = 0; i < pending.batched; ++i) total += parts[i].checked.size();
    if (n != static_cast<int>(total)) {
      logOnce("device check result", "a batched health check failed on the device; its calls are not recorded");
    }
    for (int i = 0; i < pending.batched; ++i) {
      Pending& p = parts[i];
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
    release(pending);
    return;
  }
  takeCounts(pending.rec, pending.checked, counts, n);
  sink_.record(std::move(pending.rec), pending.held, pending.args, pending.missing);
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
