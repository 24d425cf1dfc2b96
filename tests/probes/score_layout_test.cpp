// Scores in any notation are laid out as the product of the matmul that made them
// (probes/libtorch/score_layout.h): checked against the numbers, for every order einsum's
// subscripts can give Q, K and the scores, for heads folded into the batch or (multi-query
// attention) into the rows, and refused where the softmax runs over anything but the keys.
#include "probes/libtorch/score_layout.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>

namespace nanprov::probes {
namespace {

const std::map<char, int64_t> kSize = {{'b', 2}, {'h', 3}, {'i', 5}, {'j', 7}, {'d', 4}};

std::vector<int64_t> shapeOf(const std::string& labels) {
  std::vector<int64_t> out;
  for (char c : labels) out.push_back(kSize.at(c));
  return out;
}

std::vector<int64_t> orderOf(const std::string& labels, const std::string& wanted) {
  std::vector<int64_t> out;
  for (char c : wanted) out.push_back(static_cast<int64_t>(labels.find(c)));
  return out;
}

// q·kᵀ in the product's own order: [b·h, i, j], batch dims b then h.
at::Tensor product(const at::Tensor& q, const std::string& q_labels, const at::Tensor& k, const std::string& k_labels) {
  at::Tensor qq = q.permute(orderOf(q_labels, "bhid")).reshape({6, 5, 4});
  at::Tensor kk = k.permute(orderOf(k_labels, "bhjd")).reshape({6, 7, 4});
  return at::bmm(qq, kk.transpose(1, 2));
}

// Every layout of Q, K and the scores einsum's subscripts allow, with the batch dims b before h
// in the output (einsum's bmm runs over the output's batch dims in its order): scaled after the
// einsum, as attention does, the scores give back the product, the softmax over j.
TEST(ScoreLayout, EveryEinsumLayoutIsTheProduct) {
  std::string q_labels = "bhid", k_labels = "bhjd", s_labels = "bhij";
  int checked = 0;
  std::sort(q_labels.begin(), q_labels.end());
  do {
    std::sort(k_labels.begin(), k_labels.end());
    do {
      std::sort(s_labels.begin(), s_labels.end());
      do {
        if (s_labels.find('b') > s_labels.find('h')) continue;
        SCOPED_TRACE(q_labels + "," + k_labels + "->" + s_labels);
        at::Tensor q = at::randn(shapeOf(q_labels)), k = at::randn(shapeOf(k_labels));
        at::Tensor scores = at::einsum(q_labels + "," + k_labels + "->" + s_labels, {q, k}) * 0.5;
        const int64_t dim = static_cast<int64_t>(s_labels.find('j'));
        // The product's rows are the output's first free dim (einsum swaps its operands to keep
        // the output's order): with j first, the product is [b·h, j, i], and a softmax over j is
        // one over its rows.
        if (s_labels.find('i') > s_labels.find('j')) {
          EXPECT_FALSE(productLayout(scores, dim, 6, 7, 5)) << "softmax over the product's rows";
          continue;
        }
        std::optional<ProductLayout> layout = productLayout(scores, dim, 6, 5, 7);
        ASSERT_TRUE(layout);
        EXPECT_TRUE(at::allclose(inProductOrder(scores, *layout, 6, 5, 7), product(q, q_labels, k, k_labels) * 0.5));
        EXPECT_EQ(layout->batch, 2) << "b, the outermost batch dim";
        ++checked;
      } while (std::next_permutation(s_labels.begin(), s_labels.end()));
    } while (std::next_permutation(k_labels.begin(), k_labels.end()));
  } while (std::next_permutation(q_labels.begin(), q_labels.end()));
  EXPECT_EQ(checked, 24 * 24 * 6);  // of 24 · 24 · 12 output orders with b before h, half have i first
}

// matmul of [b, h, i, d] by kᵀ, and bmm with heads folded into the batch: [b·h] batches of one head.
TEST(ScoreLayout, MatmulAndFoldedHeads) {
  at::Tensor q = at::randn({2, 3, 5, 4}), k = at::randn({2, 3, 7, 4});
  at::Tensor scores = at::matmul(q, k.transpose(-2, -1));
  std::optional<ProductLayout> layout = productLayout(scores, -1, 6, 5, 7);
  ASSERT_TRUE(layout);
  EXPECT_EQ(layout->batch, 2);
  EXPECT_TRUE(at::equal(inProductOrder(scores, *layout, 6, 5, 7), scores.reshape({6, 5, 7})));

  at::Tensor folded = at::bmm(q.reshape({6, 5, 4}), k.reshape({6, 7, 4}).transpose(1, 2));
  layout = productLayout(folded, 2, 6, 5, 7);
  ASSERT_TRUE(layout);
  EXPECT_EQ(layout->batch, 6);
  EXPECT_FALSE(productLayout(folded, 1, 6, 5, 7)) << "softmax over the queries";
}

// Multi-query attention: einsum('bhid,bjd->bhij') folds the query heads into the rows, [b, h·i, j].
TEST(ScoreLayout, QueryHeadsFoldedIntoTheRows) {
  at::Tensor q = at::randn({2, 3, 5, 4}), k = at::randn({2, 7, 4});
  at::Tensor scores = at::einsum("bhid,bjd->bhij", {q, k}) * 0.5;
  std::optional<ProductLayout> layout = productLayout(scores, -1, 2, 15, 7);
  ASSERT_TRUE(layout);
  EXPECT_EQ(layout->batch, 2);
  at::Tensor expected = at::bmm(q.reshape({2, 15, 4}), k.transpose(1, 2)) * 0.5;
  EXPECT_TRUE(at::allclose(inProductOrder(scores, *layout, 2, 15, 7), expected));
}

// A batch of one keeps its place: [1, h, i, j] is one batch of h heads.
TEST(ScoreLayout, BatchOfOne) {
  at::Tensor scores = at::randn({1, 3, 5, 7});
  std::optional<ProductLayout> layout = productLayout(scores, -1, 3, 5, 7);
  ASSERT_TRUE(layout);
  EXPECT_EQ(layout->batch, 1);
}

// Scores whose memory no longer follows the product (made contiguous in another order) and
// scores of another size are not placed: the call is then counted unchecked, never misread.
TEST(ScoreLayout, RefusedWhereItCannotBePlaced) {
  at::Tensor q = at::randn({2, 5, 3, 4}), k = at::randn({2, 7, 3, 4});
  at::Tensor product = at::einsum("bihd,bjhd->bhij", {q, k});
  at::Tensor heads_last = product.permute({0, 2, 3, 1}).contiguous();  // [b, i, j, h] in its own order
  EXPECT_FALSE(productLayout(heads_last, 2, 6, 5, 7));
  EXPECT_FALSE(productLayout(product, -1, 6, 5, 8));
  EXPECT_FALSE(productLayout(product, -1, 6, 7, 5));
}

}  // namespace
}  // namespace nanprov::probes
