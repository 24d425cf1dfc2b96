#include "probes/libtorch/padded_lse.h"

#include <ATen/ATen.h>

#include <string_view>

namespace nanprov::probes {
namespace {

constexpr int64_t kLseAlignment = 32;

// Query rows of the call: SDPA's op takes Q as [batch, heads, rows, dim]; the lower-level
// _efficient_attention_* ops as [batch, rows, heads, dim].
int64_t queryRows(std::string_view op, const at::Tensor& q) {
  if (q.dim() != 4) return -1;
  return op.find("_scaled_dot_product_") != std::string_view::npos ? q.size(2) : q.size(1);
}

}  // namespace

void unpadLse(const AttentionOp& op, const RoleTensors& inputs, RoleTensors& tensors) {
  if (std::string_view(op.backend) != "efficient") return;
  const at::Tensor* q = nullptr;
  for (const auto& [role, t] : inputs) {
    if (role == Role::kQ) q = &t;
  }
  if (q == nullptr) return;
  const int64_t rows = queryRows(op.name, *q);
  for (auto& [role, t] : tensors) {
    if (role != Role::kLSE || rows <= 0 || t.dim() != 3 || t.size(0) != q->size(0)) continue;
    const int64_t padded = (rows + kLseAlignment - 1) / kLseAlignment * kLseAlignment;
    if (t.size(2) == padded && padded > rows) t = t.narrow(2, 0, rows);
  }
}

}  // namespace nanprov::probes
