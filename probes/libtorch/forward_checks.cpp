#include "probes/libtorch/forward_checks.h"

#include <utility>

#include "base/env.h"
#include "base/records/roles.h"
#include "kernels/health_check.h"
#include "probes/libtorch/check_views.h"

namespace nanprov::probes {
namespace {

static_assert(kernels::kMaxDims == 6, "ForwardChecks::Tensor keeps kMaxDims sizes and strides");

// Whether `rec` takes part: a forward or backward outside torch.compile'd graphs.
bool takesPart(const CallEvent& rec, Phase phase) { return rec.phase == phase && !rec.compiled; }

}  // namespace

ForwardChecks::ForwardChecks() : on_(envInteger("NANPROV_BACKWARD_REREAD", 0, 0) == 0) {}

void InheritedTensors::fillInto(CallEvent& rec) const {
  if (counted) counted->fetch_add(static_cast<int64_t>(pairs.size()), std::memory_order_relaxed);
  const CallTensors& from = forward->tensors();
  for (const auto& [to_index, from_index] : pairs) {
    TensorHealth& h = rec.tensors[to_index];
    const TensorHealth& f = from[from_index];
    h.nan = f.nan;
    h.posinf = f.posinf;
    h.neginf = f.neginf;
    h.max_abs = f.max_abs;
    h.all_zero = f.all_zero;
    h.max_positive = f.max_positive;
    if (holdsMaskedRows(h.role)) h.masked_rows = f.masked_rows;
  }
}

std::optional<ForwardChecks::Tensor> ForwardChecks::identify(const at::Tensor& t, Role role) {
  // Inference tensors have no version counter; a meta or storage-less tensor has no values.
  if (!t.defined() || !t.has_storage() || t.is_inference() || t.is_meta() || t.dim() > kernels::kMaxDims) {
    return std::nullopt;
  }
  Tensor id;
  id.storage = c10::weak_intrusive_ptr<c10::StorageImpl>(t.storage().getWeakStorageImpl());
  id.data = t.data_ptr();
  id.dtype = t.scalar_type();
  id.masked_rows = holdsMaskedRows(role);
  id.ndim = static_cast<int8_t>(t.dim());
  for (int64_t d = 0; d < t.dim(); ++d) {
    id.sizes[static_cast<size_t>(d)] = t.size(d);
    id.strides[static_cast<size_t>(d)] = t.stride(d);
  }
  id.version = versionOf(t);
  return id;
}

bool ForwardChecks::same(const Tensor& remembered, const Tensor& now) {
  // `now`'s storage is alive (its tensor is the call's), and the slot's weak reference keeps a
  // freed storage's address from being reused: the same address is the same storage.
  return remembered.storage._unsafe_get_target() == now.storage._unsafe_get_target() && remembered.data == now.data &&
         remembered.dtype == now.dtype && remembered.masked_rows == now.masked_rows && remembered.ndim == now.ndim &&
         remembered.sizes == now.sizes && remembered.strides == now.strides && remembered.version == now.version;
}

InheritedTensors ForwardChecks::inherit(const CallEvent& rec, const RoleTensors& tensors) {
  InheritedTensors inherited;
  if (!on_ || !takesPart(rec, Phase::kBackward) || rec.fwd_seq < 0) return inherited;
  // Identified before the claim: version counters and storages are the tensors' own.
  InlineVector<std::optional<Tensor>, kMaxCallTensors> now;
  for (const auto& [role, t] : tensors) {
    now.push_back(isOutputRole(Phase::kBackward, role) ? std::nullopt : identify(t, role));  // outputs are always read
  }
  if (!claim()) return inherited;  // a forward or backward of another thread is at the table
  Forward& forward = forwards_[static_cast<size_t>(rec.fwd_seq) % kSlots];
  if (forward.key == rec.fwd_seq && forward.counts.state() != ForwardCounts::State::kFailed) {
    for (size_t i = 0; i < now.size(); ++i) {
      if (!now[i]) continue;
      for (const Tensor& f : forward.tensors) {
        if (!same(f, *now[i])) continue;
        inherited.pairs.push_back({static_cast<uint8_t>(i), f.index});
        break;
      }
    }
    if (!inherited.empty()) {
      forward.counts.users_.fetch_add(1, std::memory_order_acq_rel);
      inherited.forward = ForwardCountsRef(&forward.counts, false);
      inherited.counted = &inherited_;
    }
  }
  unclaim();
  return inherited;
}

ForwardCountsRef ForwardChecks::remember(const CallEvent& rec, const RoleTensors& tensors,
                                         const InlineVector<uint8_t, kMaxCallTensors>& checked) {
  if (!on_ || !takesPart(rec, Phase::kForward) || rec.seq < 0) return {};
  Tensors ids;
  for (const uint8_t i : checked) {
    const auto& [role, t] = tensors[i];
    if (std::optional<Tensor> id = identify(t, role)) {
      id->index = i;
      ids.push_back(std::move(*id));
    }
  }
  if (ids.empty() || !claim()) return {};
  Forward& slot = forwards_[static_cast<size_t>(rec.seq) % kSlots];
  ForwardCountsRef counts;
  // A slot whose counts are held (its forward's check in flight, or a backward waiting for them)
  // keeps its forward: this one goes unremembered, and its backward reads its tensors.
  if (slot.counts.users_.load(std::memory_order_acquire) == 0) {
    slot.key = rec.seq;
    slot.tensors = std::move(ids);  // the older forward's weak references dropped here
    slot.counts.state_.store(ForwardCounts::State::kPending, std::memory_order_relaxed);
    slot.counts.users_.store(1, std::memory_order_relaxed);
    counts = ForwardCountsRef(&slot.counts, true);
  }
  unclaim();
  return counts;
}

void ForwardChecks::rememberMeasured(const CallEvent& rec, const RoleTensors& tensors) {
  InlineVector<uint8_t, kMaxCallTensors> all;
  for (size_t i = 0; i < tensors.size(); ++i) all.push_back(static_cast<uint8_t>(i));
  if (ForwardCountsRef counts = remember(rec, tensors, all)) counts->fill(rec.tensors);
}

}  // namespace nanprov::probes
