#include "probes/libtorch/check_views.h"

#include <c10/core/impl/VirtualGuardImpl.h>

#include "base/records/roles.h"
#include "probes/libtorch/device_queue.h"

namespace nanprov::probes {

using kernels::HealthCounts;
using kernels::TensorView;

std::optional<kernels::ElementType> elementType(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return kernels::ElementType::kFloat32;
    case at::kHalf: return kernels::ElementType::kFloat16;
    case at::kBFloat16: return kernels::ElementType::kBFloat16;
    case at::kBool: return kernels::ElementType::kBool;
    default: return std::nullopt;
  }
}

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

uint32_t versionOf(const at::Tensor& t) { return t.unsafeGetTensorImpl()->version_counter().current_version(); }

void takeCounts(CallEvent& rec, const CheckedTensors& checked, const HealthCounts* counts, int n) {
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

}  // namespace nanprov::probes
