#include "probes/libtorch/score_layout.h"

#include <ATen/ATen.h>

#include <algorithm>

namespace nanprov::probes {

std::optional<ProductLayout> productLayout(const at::Tensor& scores, int64_t dim, int64_t n, int64_t rows,
                                           int64_t keys) {
  const int64_t dims = scores.dim();
  if (dims < 2 || dim < -dims || dim >= dims) return std::nullopt;
  if (dim < 0) dim += dims;
  if (scores.numel() != n * rows * keys || scores.size(dim) != keys) return std::nullopt;
  // The dims that hold more than one element, outermost in memory first. Without a memory order
  // of its own (broadcast, overlapping), the scores' logical order is taken.
  std::vector<int64_t> memory;
  for (int64_t d = 0; d < dims; ++d) {
    if (scores.size(d) > 1) memory.push_back(d);
  }
  if (scores.is_non_overlapping_and_dense()) {
    std::stable_sort(memory.begin(), memory.end(),
                     [&](int64_t a, int64_t b) { return scores.stride(a) > scores.stride(b); });
  }
  // The keys innermost, then the rows: the dims whose sizes multiply to the product's rows
  // (several where einsum folded heads into them), the rest its batch.
  if (keys > 1) {
    if (memory.empty() || memory.back() != dim) return std::nullopt;
    memory.pop_back();
  }
  std::vector<int64_t> row_dims;
  int64_t row_count = 1;
  while (row_count < rows && !memory.empty()) {
    row_dims.insert(row_dims.begin(), memory.back());
    row_count *= scores.size(memory.back());
    memory.pop_back();
  }
  if (row_count != rows) return std::nullopt;

  ProductLayout layout;
  for (int64_t d = 0; d < dims; ++d) {
    if (scores.size(d) == 1 && d != dim) layout.order.push_back(d);
  }
  const bool leading_one =
      !layout.order.empty() && layout.order.front() == 0 && (memory.empty() || memory.front() != 0);
  layout.order.insert(layout.order.end(), memory.begin(), memory.end());
  layout.order.insert(layout.order.end(), row_dims.begin(), row_dims.end());
  layout.order.push_back(dim);
  // [batch, heads] from the batch dims: a leading dim of one is a batch of one.
  if (dims < 4) {
    layout.batch = n;
  } else if (leading_one) {
    layout.batch = 1;
  } else {
    layout.batch = memory.empty() ? 1 : scores.size(memory.front());
  }
  return layout;
}

at::Tensor inProductOrder(const at::Tensor& t, const ProductLayout& layout, int64_t n, int64_t rows, int64_t keys) {
  return t.permute(layout.order).reshape({n, rows, keys});
}

}  // namespace nanprov::probes
