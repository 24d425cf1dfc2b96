// The float64 reference attention against PyTorch's float64 MATH backend (and autograd for the
// gradients), on many random shapes with odd sizes, GQA, masks of every kind, causal, fully
// masked rows and a sliding window. The one LibTorch test translation unit.
#include "kernels/reference_attention.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <random>

namespace nanprov::reference {
namespace {

std::vector<double> values(const at::Tensor& t) {
  at::Tensor c = t.detach().contiguous().to(at::kDouble);
  return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

void expectClose(const std::vector<double>& got, const at::Tensor& want, const char* what) {
  std::vector<double> w = values(want);
  ASSERT_EQ(got.size(), w.size()) << what;
  double scale = 1;
  for (double x : w) scale = std::max(scale, std::isfinite(x) ? std::fabs(x) : 0.0);
  for (size_t i = 0; i < w.size(); ++i) {
    if (std::isinf(w[i])) {
      ASSERT_EQ(got[i], w[i]) << what << " at " << i;
    } else {
      ASSERT_NEAR(got[i], w[i], 1e-10 * scale) << what << " at " << i;
    }
  }
}

struct Case {
  AttentionShape shape;
  AttentionOptions options;
  enum class Mask { kNone, kBoolPerBatch, kBoolShared, kAdditive } mask = Mask::kNone;
  bool hide_rows = false;  // some query rows see no key
};

std::string describe(const Case& c) {
  const AttentionShape& s = c.shape;
  return "B" + std::to_string(s.batch) + " Hq" + std::to_string(s.q_heads) + " Hkv" + std::to_string(s.kv_heads) +
         " Sq" + std::to_string(s.q_len) + " Sk" + std::to_string(s.kv_len) + " D" + std::to_string(s.head_dim) +
         " Dv" + std::to_string(s.v_dim) + " mask" + std::to_string(static_cast<int>(c.mask)) +
         (c.options.causal ? " causal" : "") + (c.hide_rows ? " hidden-rows" : "");
}

// Runs one case through the reference and through torch, and compares O, LSE, dQ, dK, dV.
void check(const Case& c, uint64_t seed) {
  SCOPED_TRACE(describe(c));
  const AttentionShape& s = c.shape;
  at::manual_seed(seed);
  auto opts = at::TensorOptions().dtype(at::kDouble);
  at::Tensor q = at::randn({s.batch, s.q_heads, s.q_len, s.head_dim}, opts).requires_grad_();
  at::Tensor k = at::randn({s.batch, s.kv_heads, s.kv_len, s.head_dim}, opts).requires_grad_();
  at::Tensor v = at::randn({s.batch, s.kv_heads, s.kv_len, s.v_dim}, opts).requires_grad_();
  at::Tensor dout = at::randn({s.batch, s.q_heads, s.q_len, s.v_dim}, opts);

  std::optional<at::Tensor> mask;
  at::Tensor visible = at::ones({s.batch, s.q_heads, s.q_len, s.kv_len}, at::kBool);
  if (c.mask == Case::Mask::kBoolPerBatch) mask = at::rand({s.batch, 1, s.q_len, s.kv_len}) > 0.3;
  if (c.mask == Case::Mask::kBoolShared) mask = at::rand({s.q_len, s.kv_len}) > 0.3;
  if (c.mask == Case::Mask::kAdditive) {
    mask = at::randn({s.batch, s.q_heads, s.q_len, s.kv_len}, opts);
    mask = mask->masked_fill(at::rand(mask->sizes()) < 0.2, -INFINITY);
  }
  if (c.hide_rows && mask) {
    at::Tensor hidden = mask->clone();
    hidden.select(-2, 0).fill_(mask->scalar_type() == at::kBool ? at::Scalar(false) : at::Scalar(-INFINITY));
    mask = hidden;
  }
  MaskView view;
  at::Tensor expanded;
  if (mask) {
    expanded = mask->expand({s.batch, s.q_heads, s.q_len, s.kv_len});
    for (int d = 0; d < 4; ++d) view.strides[d] = expanded.stride(d);
    if (mask->scalar_type() == at::kBool) {
      view.kind = MaskView::Kind::kBool;
      view.allow = reinterpret_cast<const uint8_t*>(expanded.data_ptr<bool>());
    } else {
      view.kind = MaskView::Kind::kAdditive;
      view.additive = expanded.data_ptr<double>();
    }
  }

  std::optional<double> scale = c.options.scale != 0 ? std::optional<double>(c.options.scale) : std::nullopt;
  // SDPA's front end turns a bool mask into an additive one before any backend sees it; the MATH
  // op called directly would add the bools as numbers.
  std::optional<at::Tensor> additive = mask;
  if (mask && mask->scalar_type() == at::kBool) {
    additive = at::zeros(mask->sizes(), opts).masked_fill(mask->logical_not(), -INFINITY);
  }
  auto [out, weights] = at::_scaled_dot_product_attention_math(q, k, v, additive, 0.0, c.options.causal, {}, scale,
                                                               s.q_heads != s.kv_heads);
  out.backward(dout);

  // LSE as PyTorch defines it: logsumexp over the scaled, masked logits.
  const int64_t group = s.q_heads / s.kv_heads;
  at::Tensor kk = k.detach().repeat_interleave(group, 1);
  double sc = c.options.scale != 0 ? c.options.scale : 1.0 / std::sqrt(static_cast<double>(s.head_dim));
  at::Tensor logits = at::matmul(q.detach(), kk.transpose(-2, -1)) * sc;
  if (c.options.causal) logits = logits.masked_fill(at::ones({s.q_len, s.kv_len}, at::kBool).tril().logical_not(), -INFINITY);
  if (mask) logits = mask->scalar_type() == at::kBool ? logits.masked_fill(mask->logical_not(), -INFINITY) : logits + *mask;
  at::Tensor lse = logits.logsumexp(-1);

  auto f = forward(s, values(q), values(k), values(v), view, c.options);
  ASSERT_TRUE(f.ok()) << f.status().message();
  expectClose(f->out, out, "O");
  expectClose(f->lse, lse, "LSE");
  auto g = backward(s, values(q), values(k), values(v), view, c.options, values(dout));
  ASSERT_TRUE(g.ok()) << g.status().message();
  expectClose(g->dq, q.grad(), "dQ");
  expectClose(g->dk, k.grad(), "dK");
  expectClose(g->dv, v.grad(), "dV");
}

TEST(ReferenceAttention, MatchesPyTorchMathOnRandomShapes) {
  std::mt19937 rng(2026);
  auto pick = [&](std::vector<int64_t> from) { return from[rng() % from.size()]; };
  for (int n = 0; n < 60; ++n) {
    Case c;
    c.shape.batch = pick({1, 2});
    c.shape.kv_heads = pick({1, 2, 3});
    c.shape.q_heads = c.shape.kv_heads * pick({1, 2, 4});
    c.shape.q_len = pick({1, 2, 7, 16, 33});
    c.shape.kv_len = pick({1, 3, 16, 37, 64});
    c.shape.head_dim = pick({3, 8, 16, 64});
    c.shape.v_dim = n % 5 == 0 ? pick({5, 32}) : c.shape.head_dim;
    c.mask = static_cast<Case::Mask>(rng() % 4);
    c.options.causal = c.mask == Case::Mask::kNone && rng() % 2;  // PyTorch refuses both at once
    c.options.scale = rng() % 3 == 0 ? 0.37 : 0;
    c.hide_rows = c.mask != Case::Mask::kNone && rng() % 2;
    check(c, static_cast<uint64_t>(n));
    if (HasFatalFailure()) return;
  }
}

TEST(ReferenceAttention, HeadDim512WithGqaAndFullyMaskedRows) {
  Case c;
  c.shape = {.batch = 1, .q_heads = 4, .kv_heads = 1, .q_len = 9, .kv_len = 13, .head_dim = 512, .v_dim = 512};
  c.mask = Case::Mask::kBoolPerBatch;
  c.hide_rows = true;
  check(c, 7);
}

TEST(ReferenceAttention, FullyMaskedRowGivesZerosAndMinusInfLse) {
  AttentionShape s{.batch = 1, .q_heads = 1, .kv_heads = 1, .q_len = 2, .kv_len = 3, .head_dim = 2, .v_dim = 2};
  std::vector<double> q(4, 1.0), k(6, 0.5), v = {1, 2, 3, 4, 5, 6};
  const uint8_t allow[] = {0, 0, 0, 1, 1, 1};  // row 0 sees nothing
  MaskView mask{.kind = MaskView::Kind::kBool, .allow = allow, .strides = {0, 0, 3, 1}};
  auto f = forward(s, q, k, v, mask, {});
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->out[0], 0.0);
  EXPECT_EQ(f->out[1], 0.0);
  EXPECT_TRUE(std::isinf(f->lse[0]) && f->lse[0] < 0);
  EXPECT_NEAR(f->out[2], 3.0, 1e-12) << "equal logits: the mean of V";
  auto g = backward(s, q, k, v, mask, {}, std::vector<double>(4, 1.0));
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->dq[0], 0.0);
  EXPECT_EQ(g->dq[1], 0.0);
}

TEST(ReferenceAttention, SlidingWindowEqualsItsExplicitMask) {
  AttentionShape s{.batch = 1, .q_heads = 2, .kv_heads = 1, .q_len = 11, .kv_len = 11, .head_dim = 8, .v_dim = 8};
  at::manual_seed(3);
  auto opts = at::TensorOptions().dtype(at::kDouble);
  std::vector<double> q = values(at::randn({1, 2, 11, 8}, opts)), k = values(at::randn({1, 1, 11, 8}, opts)),
                      v = values(at::randn({1, 1, 11, 8}, opts)), dout = values(at::randn({1, 2, 11, 8}, opts));
  AttentionOptions window{.causal = true, .window_left = 3, .window_right = 0};
  std::vector<uint8_t> allow(11 * 11);
  for (int i = 0; i < 11; ++i)
    for (int j = 0; j < 11; ++j) allow[i * 11 + j] = j <= i && j >= i - 3;
  MaskView explicit_mask{.kind = MaskView::Kind::kBool, .allow = allow.data(), .strides = {0, 0, 11, 1}};
  auto a = forward(s, q, k, v, {}, window);
  auto b = forward(s, q, k, v, explicit_mask, {});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->out, b->out);
  auto ga = backward(s, q, k, v, {}, window, dout);
  auto gb = backward(s, q, k, v, explicit_mask, {}, dout);
  ASSERT_TRUE(ga.ok() && gb.ok());
  EXPECT_EQ(ga->dk, gb->dk);
}

TEST(ReferenceAttention, BadShapesAreRefusedWithAReason) {
  AttentionShape s{.batch = 1, .q_heads = 3, .kv_heads = 2, .q_len = 1, .kv_len = 1, .head_dim = 1, .v_dim = 1};
  auto f = forward(s, std::vector<double>(3), std::vector<double>(2), std::vector<double>(2), {}, {});
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("not a multiple"), std::string::npos);
  s.q_heads = 2;
  f = forward(s, std::vector<double>(5), std::vector<double>(2), std::vector<double>(2), {}, {});
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("different number of elements"), std::string::npos);
}

}  // namespace
}  // namespace nanprov::reference
