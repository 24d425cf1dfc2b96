#include "probes/tensor_health.h"

#include <ATen/ATen.h>

#include <cmath>
#include <string>

namespace nanprov {
namespace {

template <typename T>
void scan(const T* p, int64_t n, TensorHealth* h) {
  int64_t nan = 0, posinf = 0, neginf = 0;
  double max_abs = 0.0;
  bool all_zero = true;
  for (int64_t i = 0; i < n; ++i) {
    T x = p[i];
    if (std::isnan(x)) {
      ++nan;
    } else if (std::isinf(x)) {
      (x > 0 ? posinf : neginf)++;
    } else {
      double a = std::fabs(static_cast<double>(x));
      if (a > max_abs) max_abs = a;
    }
    all_zero = all_zero && x == T(0);
  }
  h->nan = nan;
  h->posinf = posinf;
  h->neginf = neginf;
  h->max_abs = max_abs;
  h->all_zero = n > 0 && all_zero;
}

// No iostreams here: with torch 2.11's build flags an ostringstream in this library crashed
// inside the training process (seen on the H200 machine); plain string building is also cheaper.
std::string shapeOf(const at::Tensor& t) {
  std::string out = "[";
  for (int64_t d = 0; d < t.dim(); ++d) out += (d ? "," : "") + std::to_string(t.size(d));
  return out + "]";
}

// Query rows with no visible key, counted over the mask's own (unbroadcast) shape.
// A bool mask is True where attention is allowed; an additive mask hides with -inf.
int64_t fullyMaskedRows(const at::Tensor& mask) {
  if (mask.dim() == 0 || mask.numel() == 0) return 0;
  at::Tensor hidden = mask.scalar_type() == at::kBool ? mask.logical_not() : mask.eq(-INFINITY);
  return hidden.all(-1).sum().item<int64_t>();
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
  h.role = roleName(role);
  h.dtype = std::string(c10::toString(t.scalar_type()));
  h.shape = shapeOf(t);
  h.numel = t.numel();
  return h;
}

TensorHealth measureTensor(const at::Tensor& t, Role role) {
  TensorHealth h = describeTensor(t, role);
  if (role == Role::kMask) h.masked_rows = fullyMaskedRows(t);
  if (!at::isFloatingType(t.scalar_type()) || t.numel() == 0) {
    h.all_zero = t.numel() > 0 && !t.any().item<bool>();
    return h;
  }
  // Sub-fp32 types widen exactly to fp32; fp64 is scanned as is.
  at::Tensor host = t.detach().to(at::kCPU);
  if (host.scalar_type() == at::kDouble) {
    host = host.contiguous();
    scan(host.data_ptr<double>(), host.numel(), &h);
  } else {
    host = host.to(at::kFloat).contiguous();
    scan(host.data_ptr<float>(), host.numel(), &h);
  }
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
