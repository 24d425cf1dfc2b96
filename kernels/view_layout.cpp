#include "kernels/view_layout.h"

#include <array>

namespace nanprov::kernels {

TensorView simplified(const TensorView& v) {
  if (v.mask != MaskKind::kNotAMask || v.numel == 0) return v;
  struct Dim {
    int64_t size, stride;
  };
  std::array<Dim, kMaxDims> dims{};
  int n = 0;
  for (int d = 0; d < v.ndim; ++d) {
    if (v.sizes[d] != 1) dims[n++] = {v.sizes[d], v.strides[d]};
  }
  // Stable, so equal strides (only possible with stride 0 or overlapping views) keep their order.
  // An insertion sort: at most kMaxDims entries, and std::stable_sort would allocate its buffer
  // on every check launched.
  auto outer = [](const Dim& a, const Dim& b) {
    if ((a.stride == 0) != (b.stride == 0)) return a.stride == 0;
    return a.stride > b.stride;
  };
  for (int i = 1; i < n; ++i) {
    const Dim d = dims[i];
    int j = i;
    for (; j > 0 && outer(d, dims[j - 1]); --j) dims[j] = dims[j - 1];
    dims[j] = d;
  }
  int merged = 0;
  for (int d = 0; d < n; ++d) {
    if (merged > 0 && dims[merged - 1].stride == dims[d].stride * dims[d].size) {
      dims[merged - 1] = {dims[merged - 1].size * dims[d].size, dims[d].stride};
    } else {
      dims[merged++] = dims[d];
    }
  }
  TensorView out = v;
  out.ndim = merged;
  for (int d = 0; d < kMaxDims; ++d) {
    out.sizes[d] = d < merged ? dims[d].size : 0;
    out.strides[d] = d < merged ? dims[d].stride : 0;
  }
  out.contiguous = merged == 0 || (merged == 1 && out.strides[0] == 1);
  return out;
}

bool sameElements(const TensorView& a, const TensorView& b) {
  if (a.data != b.data || a.numel != b.numel || a.type != b.type || a.mask != b.mask || a.ndim != b.ndim) return false;
  for (int d = 0; d < a.ndim; ++d) {
    if (a.sizes[d] != b.sizes[d] || a.strides[d] != b.strides[d]) return false;
  }
  return true;
}

}  // namespace nanprov::kernels
