// Attention written in plain ops is captured with its scores S (or, backward, its probabilities P):
// replay reads the scale and the additive bias from them (replay/score_bias.h). The bias and scale
// must reproduce S up to the run's rounding, hidden keys stay hidden, and the run's own overflow is
// no bias.
#include "replay/score_bias.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace nanprov::replay {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

CapturedCall plainOpsCall(const at::Tensor& q, const at::Tensor& k, const at::Tensor& s) {
  CapturedCall call;
  call.meta["op"] = "softmax_attention";
  call.meta["arg.scores_by"] = "matmul";
  call.tensors = {{"Q", q}, {"K", k}, {"V", k.clone()}, {"S", s}};
  call.batch = q.size(0), call.q_heads = q.size(1), call.kv_heads = k.size(1);
  call.s_q = q.size(2), call.s_kv = k.size(2), call.head_dim = q.size(3), call.v_dim = k.size(3);
  return call;
}

TEST(ScoreBias, AScaledProductAloneCarriesNoBias) {
  at::manual_seed(0);
  at::Tensor q = at::randn({2, 3, 5, 8}), k = at::randn({2, 3, 6, 8});
  at::Tensor s = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(8.0);
  CapturedCall call = plainOpsCall(q, k, s);
  ASSERT_TRUE(deriveScoreBias(call).ok());
  EXPECT_DOUBLE_EQ(*call.scale, 1 / std::sqrt(8.0)) << "snapped to 1/sqrt(head_dim)";
  EXPECT_FALSE(call.has("mask"));
  EXPECT_FALSE(call.has("S")) << "S is read, then dropped";
}

TEST(ScoreBias, AMaskIsWhatIsLeftAndTheScaleIsExact) {
  at::manual_seed(1);
  at::Tensor q = at::randn({1, 2, 4, 8}), k = at::randn({1, 2, 4, 8});
  at::Tensor hidden = at::ones({4, 4}, at::kBool).triu(1);
  at::Tensor s = (at::matmul(q, k.transpose(-2, -1)) * 0.3).masked_fill(hidden, -kInf);
  CapturedCall call = plainOpsCall(q, k, s);
  ASSERT_TRUE(deriveScoreBias(call).ok());
  EXPECT_NEAR(*call.scale, 0.3, 1e-6);
  ASSERT_TRUE(call.has("mask"));
  at::Tensor m = call.at("mask");
  EXPECT_TRUE(at::isneginf(m).eq(hidden.expand_as(m)).all().item<bool>()) << "hidden keys stay hidden";
  EXPECT_TRUE(m.masked_select(hidden.logical_not().expand_as(m)).eq(0).all().item<bool>());
}

// A dense bias cannot be told from a slope in general (it moves the estimate by <B, R>/<R, R>), but
// scale and bias together always rebuild the scores the run softmaxed.
TEST(ScoreBias, ADenseBiasAndAMaskRebuildTheScores) {
  at::manual_seed(1);
  at::Tensor q = at::randn({1, 2, 4, 8}), k = at::randn({1, 2, 4, 8});
  at::Tensor bias = at::randn({1, 2, 4, 4}) * 0.1;
  at::Tensor hidden = at::ones({4, 4}, at::kBool).triu(1);
  at::Tensor s = (at::matmul(q, k.transpose(-2, -1)) * 0.3 + bias).masked_fill(hidden, -kInf);
  CapturedCall call = plainOpsCall(q, k, s);
  ASSERT_TRUE(deriveScoreBias(call).ok());
  EXPECT_NEAR(*call.scale, 0.3, 0.03);
  ASSERT_TRUE(call.has("mask"));
  at::Tensor rebuilt = at::matmul(q, k.transpose(-2, -1)) * *call.scale + call.at("mask");
  at::Tensor seen = hidden.logical_not().expand_as(rebuilt);
  EXPECT_TRUE(at::isneginf(rebuilt).eq(hidden.expand_as(rebuilt)).all().item<bool>());
  EXPECT_TRUE(at::allclose(rebuilt.masked_select(seen), s.masked_select(seen), 1e-5, 1e-5));
}

TEST(ScoreBias, TheRunsOwnOverflowIsNoBias) {
  at::Tensor q = at::ones({1, 1, 2, 4}) * 1e20, k = at::ones({1, 1, 3, 4}) * 1e20;
  q[0][0][1] = 1;  // a second row that stays finite
  at::Tensor s = at::matmul(q, k.transpose(-2, -1));
  ASSERT_TRUE(at::isinf(s[0][0][0]).all().item<bool>());
  CapturedCall call = plainOpsCall(q, k, s);
  ASSERT_TRUE(deriveScoreBias(call).ok());
  EXPECT_DOUBLE_EQ(*call.scale, 1.0);
  EXPECT_FALSE(call.has("mask")) << "the inf scores are the product's own";
}

// The run's kernel summed q·k in an order that overflowed where the replay's product does not (a
// float32 baddbmm on cuBLAS against the replay's): near float32's largest value an inf in S is
// still the call's own, never a bias of +inf or a hidden key, and the float64 reference stays finite.
TEST(ScoreBias, AnOverflowAnotherSummingOrderMissesIsNoBiasEither) {
  at::Tensor q = at::ones({1, 1, 3, 4}), k = at::ones({1, 1, 3, 4});
  q[0][0][0] = at::tensor({1.5e19f, -1.5e19f, 1.5e19f, 1.0f});
  q[0][0][1] = at::tensor({-1.5e19f, 1.5e19f, -1.5e19f, 1.0f});
  k.mul_(1e19);
  at::Tensor s = at::matmul(q, k.transpose(-2, -1));
  ASSERT_TRUE(at::isfinite(s[0][0][0]).all().item<bool>()) << "summed in order, these rows stay finite";
  s[0][0][0][1] = kInf;  // summed in another order, they overflowed
  s[0][0][1][2] = -kInf;
  s[0][0][2][0] = -kInf;  // row 2's products are small: that -inf is a hidden key
  CapturedCall call = plainOpsCall(q, k, s);
  call.meta["arg.scores_by"] = "baddbmm";
  call.scale = 1.0;
  ASSERT_TRUE(deriveScoreBias(call).ok());
  ASSERT_TRUE(call.has("mask"));
  at::Tensor m = call.at("mask").to(at::kDouble);
  EXPECT_EQ(m[0][0][0][1].item<double>(), 0) << "no +inf bias";
  EXPECT_EQ(m[0][0][1][2].item<double>(), 0) << "no hidden key where the product may overflow";
  EXPECT_TRUE(std::isinf(m[0][0][2][0].item<double>())) << "a hidden key where it cannot";
  EXPECT_EQ(at::isnan(m).sum().item<int64_t>(), 0);
}

TEST(ScoreBias, ABackwardCaptureReadsTheBiasFromP) {
  at::manual_seed(2);
  at::Tensor q = at::randn({1, 2, 4, 8}, at::kDouble), k = at::randn({1, 2, 5, 8}, at::kDouble);
  at::Tensor bias = at::randn({1, 2, 4, 5}, at::kDouble);
  at::Tensor s = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(8.0) + bias;
  CapturedCall call = plainOpsCall(q, k, s);
  call.tensors.erase("S");
  call.tensors["P"] = at::softmax(s, -1);
  ASSERT_TRUE(deriveScoreBias(call).ok());
  ASSERT_TRUE(call.has("mask"));
  at::Tensor rebuilt = at::softmax(at::matmul(q, k.transpose(-2, -1)) * *call.scale + call.at("mask"), -1);
  EXPECT_TRUE(at::allclose(rebuilt, at::softmax(s, -1), 1e-9, 1e-12)) << "the same probabilities, row constants aside";
}

TEST(ScoreBias, OtherCapturesAreLeftAlone) {
  CapturedCall call;
  call.meta["op"] = "aten::_scaled_dot_product_flash_attention_for_cpu";
  call.tensors = {{"Q", at::ones({1, 1, 2, 2})}};
  ASSERT_TRUE(deriveScoreBias(call).ok());
  EXPECT_FALSE(call.scale);
}

}  // namespace
}  // namespace nanprov::replay
