// Where a matmul's product [n, rows, keys] sits inside the scores a softmax was handed, whatever
// notation made them: q @ kᵀ, bmm, baddbmm, or einsum with any subscripts ('b h i d, b h j d ->
// b h i j', 'b i h d, b j h d -> b h i j', heads folded into the batch, or multi-query attention,
// whose heads einsum folds into the rows). einsum runs one bmm over the output's batch dims, then
// its first and its second free dim (in the output's order; it swaps the operands to keep it), and
// hands out a view of the product; elementwise ops after it (scale, mask, bias, casts) keep that
// memory order. So the scores' strides, not their dims' order, say which dims are the product's
// batch, its rows and its keys, and the softmax must run over the keys.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace nanprov::probes {

struct ProductLayout {
  // The scores' dims in the product's order: scores.permute(order).reshape({n, rows, keys}) is
  // the product's [n, rows, keys], element for element.
  std::vector<int64_t> order;
  // How n splits into [batch, heads]: the outermost of the scores' batch dims is the batch, the
  // rest its heads; scores of 3 dims (heads folded into the batch) are n batches of one head.
  int64_t batch = 1;
};

// The layout of `scores` (softmaxed over `dim`) as the product [n, rows, keys], or nothing where
// they are not that product's: other sizes, the softmax over another dim, or a memory order that
// does not flatten to it.
std::optional<ProductLayout> productLayout(const at::Tensor& scores, int64_t dim, int64_t n, int64_t rows,
                                           int64_t keys);

// `t` (shaped as the scores) in the product's order, [n, rows, keys].
at::Tensor inProductOrder(const at::Tensor& t, const ProductLayout& layout, int64_t n, int64_t rows, int64_t keys);

}  // namespace nanprov::probes
