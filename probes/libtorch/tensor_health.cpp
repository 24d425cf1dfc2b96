#include "probes/libtorch/tensor_health.h"

#include <ATen/ATen.h>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <c10/util/SmallVector.h>

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <type_traits>
#include <string>

#include "kernels/health_check.h"

namespace nanprov {
namespace {

// Calls row(p, n, stride) for every innermost row of `t` (sizes and strides as they are: views,
// transposes and stride-0 broadcasts alike), so a tensor is read once, in place, with no copy and
// no ATen op: on the CPU a call's tensors are small and an op's fixed cost would dominate.
template <typename T, typename Row>
void forEachRow(const at::Tensor& t, Row&& row) {
  const T* base = static_cast<const T*>(t.const_data_ptr());
  const int64_t dims = t.dim();
  if (dims == 0) return row(base, 1, 1);
  const auto sizes = t.sizes();
  const auto strides = t.strides();
  const int64_t n = sizes[dims - 1], stride = strides[dims - 1];
  c10::SmallVector<int64_t, 8> index(static_cast<size_t>(dims - 1), 0);
  for (int64_t offset = 0;;) {
    row(base + offset, n, stride);
    int64_t d = dims - 2;
    for (; d >= 0; --d) {  // the next outer index, like an odometer
      if (++index[d] < sizes[d]) {
        offset += strides[d];
        break;
      }
      offset -= strides[d] * (sizes[d] - 1);
      index[d] = 0;
    }
    if (d < 0) return;
  }
}

// One pass: NaN, ±Inf, the largest finite |x| and whether every value is ±0. Every dtype but
// double widens to float exactly.
template <typename T>
void scan(const at::Tensor& t, TensorHealth* h) {
  using Wide = std::conditional_t<std::is_same_v<T, double>, double, float>;
  int64_t nan = 0, posinf = 0, neginf = 0;
  Wide max_abs = 0;
  bool all_zero = true;
  forEachRow<T>(t, [&](const T* p, int64_t n, int64_t stride) {
    for (int64_t i = 0; i < n; ++i) {
      const Wide x = static_cast<Wide>(p[i * stride]);
      if (std::isnan(x)) ++nan;
      else if (std::isinf(x)) (x > 0 ? posinf : neginf)++;
      else max_abs = std::max(max_abs, std::fabs(x));
      all_zero = all_zero && x == 0;
    }
  });
  h->nan = nan;
  h->posinf = posinf;
  h->neginf = neginf;
  h->max_abs = static_cast<double>(max_abs);
  h->all_zero = h->numel > 0 && all_zero;
}

// Query rows with no visible key, counted over the mask's own (unbroadcast) shape.
// A bool mask is True where attention is allowed; an additive mask hides with a bias at or below
// kernels::kHiddenBias (-inf, or SDPA's conversion of a bool mask for cuDNN).
template <typename T>
int64_t hiddenRows(const at::Tensor& mask) {
  int64_t rows = 0;
  forEachRow<T>(mask, [&](const T* p, int64_t n, int64_t stride) {
    bool hidden = true;
    for (int64_t i = 0; i < n && hidden; ++i) {
      if constexpr (std::is_same_v<T, bool>) hidden = !p[i * stride];
      else hidden = static_cast<double>(p[i * stride]) <= kernels::kHiddenBias;
    }
    rows += hidden;
  });
  return rows;
}

int64_t fullyMaskedRows(const at::Tensor& mask) {
  if (mask.dim() == 0 || mask.numel() == 0) return 0;
  switch (mask.scalar_type()) {
    case at::kBool: return hiddenRows<bool>(mask);
    case at::kFloat: return hiddenRows<float>(mask);
    case at::kDouble: return hiddenRows<double>(mask);
    case at::kBFloat16: return hiddenRows<c10::BFloat16>(mask);
    case at::kHalf: return hiddenRows<c10::Half>(mask);
    default: {
      at::Tensor hidden = mask.le(kernels::kHiddenBias);
      return hidden.all(-1).sum().item<int64_t>();
    }
  }
}

}  // namespace

int cudaDeviceOf(const RoleTensors& tensors) {
  for (const auto& [role, t] : tensors) {
    if (t.is_cuda()) return t.device().index();
  }
  return -1;
}

TensorHealth describeTensor(const at::Tensor& t, Role role) {
  TensorHealth h;
  h.role = role;
  h.dtype = DtypeName::ofStatic(c10::toString(t.scalar_type()));
  const auto sizes = t.sizes();
  h.shape = TensorShape::of(sizes.data(), static_cast<int>(sizes.size()));
  h.numel = t.numel();
  return h;
}

namespace {

// Counts of `host` (a CPU tensor) into `h`, whose numel is set.
void countValues(const at::Tensor& host, TensorHealth* h) {
  if (!at::isFloatingType(host.scalar_type()) || host.numel() == 0) {
    h->all_zero = host.numel() > 0 && !host.any().item<bool>();
    return;
  }
  switch (host.scalar_type()) {
    case at::kFloat: scan<float>(host, h); break;
    case at::kDouble: scan<double>(host, h); break;
    case at::kBFloat16: scan<c10::BFloat16>(host, h); break;
    case at::kHalf: scan<c10::Half>(host, h); break;
    default: {  // other floating types (float8...): widened to float32 exactly
      const at::Tensor wide = host.to(at::kFloat);
      scan<float>(wide, h);
    }
  }
}

// Read where it lies (a CUDA tensor the fused check could not take is copied once).
at::Tensor onHost(const at::Tensor& t) { return t.is_cpu() ? t.detach() : t.detach().to(at::kCPU); }

}  // namespace

TensorHealth measureTensor(const at::Tensor& t, Role role) {
  TensorHealth h = describeTensor(t, role);
  const at::Tensor host = onHost(t);
  if (role == Role::kMask) h.masked_rows = fullyMaskedRows(host);
  countValues(host, &h);
  return h;
}

TensorHealth measureValues(const at::Tensor& t) {
  TensorHealth h;
  h.numel = t.numel();
  countValues(onHost(t), &h);
  return h;
}

void corrupt(const at::Tensor& t, const InjectionSpec& spec) {
  if (t.numel() == 0) return;
  at::Tensor target = t.detach();
  switch (spec.corruption) {
    case Corruption::kZero: target.zero_(); return;
    case Corruption::kScale: target.mul_(spec.value); return;
    case Corruption::kFirstElement:
      while (target.dim() > 0) target = target.select(0, 0);
      target.fill_(spec.value);
      return;
  }
}

}  // namespace nanprov
