#include "probes/libtorch/measured_checks.h"

#include <optional>
#include <string>

#include "base/inline_vector.h"
#include "base/log_once.h"
#include "probes/core/probe_cost.h"
#include "probes/libtorch/tensor_health.h"

namespace nanprov::probes {
namespace {

using kernels::TensorView;

// Dense checks are the gradient sentinel's (a few a step) and the trail's (one per module call):
// fewer and larger slots than the fused checks' (about 6 KB each, device and mapped memory).
constexpr int kDenseSlots = 256;
constexpr int64_t kPollEvery = 8;  // measures between polls for finished checks

static_assert(MeasuredChecks::kMaxMeasured <= kernels::kMaxTensors &&
              MeasuredChecks::kMaxMeasuredDense <= kernels::kMaxDense);

}  // namespace

void MeasuredChecks::measureOnHost(const std::vector<at::Tensor>& tensors, MeasuredSink& sink, uint64_t context) {
  std::vector<Counts> counts(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    TensorHealth h = measureValues(tensors[i]);
    counts[i] = {h.nan, h.posinf, h.neginf, h.max_abs};
  }
  lanes_.countHostSyncs(static_cast<int64_t>(tensors.size()));
  sink.receive(context, counts.data(), static_cast<int>(counts.size()));
}

bool MeasuredChecks::measure(const std::vector<at::Tensor>& tensors, MeasuredSink& sink, uint64_t context) {
  const int device = !tensors.empty() && tensors.front().is_cuda() ? tensors.front().device().index() : -1;
  std::optional<c10::Stream> stream;
  if (device >= 0) {
    stream = currentStream(device);
    if (capturing(*stream)) {
      logOnce("measure in graph capture", "tensors inside CUDA graph capture are not checked (gradient sentinel)");
      return false;
    }
  }
  CheckLane* lane = device < 0 || tensors.size() > kMaxMeasuredDense ? nullptr : lanes_.laneFor(device);
  if (lane && ++lane->measures % kPollEvery == 0) {  // as submit() does: finished checks free their slots
    ProbeCost::Scope collecting(ProbeStage::kCollecting);
    lanes_.collectLane(*lane, false);
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
  PendingCheck pending;
  pending.measured = &sink;
  pending.context = context;
  if (lanes_.enqueue(*lane, std::move(pending), views, *stream)) measureOnHost(tensors, sink, context);
  else fused_launches_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool MeasuredChecks::denseCheckable(const at::Tensor& t) {
  const auto type = elementType(t.scalar_type());
  return t.is_cuda() && t.has_storage() && t.is_contiguous() && t.numel() < (int64_t{1} << 56) && type &&
         *type != kernels::ElementType::kBool;
}

bool MeasuredChecks::wordSummable(const at::Tensor& t) {
  return denseCheckable(t) &&
         kernels::wordSummable(kernels::DenseTensor::of(t.data_ptr(), t.numel(), *elementType(t.scalar_type())));
}

int MeasuredChecks::denseBatch(int device) {
  CheckLane* lane = device >= 0 ? lanes_.laneFor(device) : nullptr;
  return lane && !lane->dense_failed ? kMaxMeasuredDense : kMaxMeasured;
}

bool MeasuredChecks::enqueueDense(CheckLane& lane, const std::vector<at::Tensor>& tensors, MeasuredSink& sink,
                                  uint64_t context, const c10::Stream& stream) {
  if (tensors.empty() || lane.dense_failed) return false;
  InlineVector<kernels::DenseTensor, kernels::kMaxDense> dense;
  for (const at::Tensor& t : tensors) {
    if (!denseCheckable(t) || t.device().index() != lane.device) return false;
    dense.push_back(kernels::DenseTensor::of(t.data_ptr(), t.numel(), *elementType(t.scalar_type())));
  }
  DeviceQueue* queue = lane.dense.load(std::memory_order_acquire);
  if (!queue) {
    auto created = lanes_.makeQueue(lane.device, kDenseSlots, kernels::CheckKind::kDense);
    if (!created.ok()) {
      lane.dense_failed = true;
      logOnce("dense queue",
              "dense checks unavailable on cuda:" + std::to_string(lane.device) +
                  ", gradients and parameters are checked twelve to a launch: " + created.status().message());
      return false;
    }
    lane.measuring.resize(static_cast<size_t>(created.value()->slots()));
    queue = created->release();  // leaked with the lane: checks may be in flight at exit
    lane.dense.store(queue, std::memory_order_release);
  }
  const int slot = queue->reserve(CheckLanes::denseReadyFor(lane));
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
  logOnce("dense check",
          "dense check failed; gradients and parameters are checked twelve to a launch from now on: " + st.message());
  return false;
}

}  // namespace nanprov::probes
