// The warning rule (base/logit_trend.h): where a call's logit comes from, and when a layer's trend
// is worth a warning, once.
#include "base/logit_trend.h"

#include <gtest/gtest.h>

namespace nanprov {
namespace {

TensorHealth tensor(Role role, const char* dtype, double max_abs, const char* shape = "[2,4,8,16]") {
  return TensorHealth{.role = role,
                      .dtype = DtypeName::intern(dtype),
                      .shape = *TensorShape::parse(shape),
                      .numel = 1024,
                      .max_abs = max_abs};
}

CallRecord forward(std::vector<TensorHealth> tensors, const char* backend = "flash_cpu") {
  CallRecord c;
  c.phase = Phase::kForward;
  c.backend = backend;
  c.tensors = std::move(tensors);
  return c;
}

CallLogit logit(double v, const char* dtype = "Float") { return CallLogit{v, LogitSource::kLse, dtype}; }

TEST(LogitTrend, ScoresFirstThenLseThenABoundFromQAndK) {
  auto s = callLogit(forward({tensor(Role::kQ, "Half", 2), tensor(Role::kK, "Half", 3), tensor(Role::kS, "Half", 40)}));
  ASSERT_TRUE(s);
  EXPECT_EQ(s->source, LogitSource::kScores);
  EXPECT_EQ(s->value, 40);
  EXPECT_EQ(s->scores_dtype, "Half");

  auto lse = callLogit(
      forward({tensor(Role::kQ, "BFloat16", 2), tensor(Role::kK, "BFloat16", 3), tensor(Role::kLSE, "Float", 7)}));
  ASSERT_TRUE(lse);
  EXPECT_EQ(lse->source, LogitSource::kLse);
  EXPECT_EQ(lse->value, 7);
  EXPECT_EQ(lse->scores_dtype, "Float") << "fused kernels compute scores in float32";

  auto bound = callLogit(forward({tensor(Role::kQ, "BFloat16", 2), tensor(Role::kK, "BFloat16", 3)}, "math"));
  ASSERT_TRUE(bound);
  EXPECT_EQ(bound->source, LogitSource::kBound);
  EXPECT_DOUBLE_EQ(bound->value, 4.0 * 2 * 3) << "sqrt(16) |Q|max |K|max";
  EXPECT_EQ(bound->scores_dtype, "BFloat16") << "MATH computes in the inputs' type";

  // Hugging Face's mask fill (finfo.min) hides the scores' own largest: the bound stands in.
  auto filled = callLogit(
      forward({tensor(Role::kQ, "Float", 1), tensor(Role::kK, "Float", 1), tensor(Role::kS, "Float", 3.4e38)}));
  ASSERT_TRUE(filled);
  EXPECT_EQ(filled->source, LogitSource::kBound);

  // All NaN says nothing of size; a backward call has no logit.
  TensorHealth nan_scores = tensor(Role::kS, "Half", 0);
  nan_scores.nan = nan_scores.numel;
  auto from_lse = callLogit(forward({nan_scores, tensor(Role::kLSE, "Float", 9)}));
  ASSERT_TRUE(from_lse);
  EXPECT_EQ(from_lse->source, LogitSource::kLse);
  CallRecord bwd = forward({tensor(Role::kS, "Half", 4)});
  bwd.phase = Phase::kBackward;
  EXPECT_FALSE(callLogit(bwd));
}

// A mask's fills are not logits (issue 61): where the check measured the largest value above 0,
// that is the logit whatever the fill (-1e9, a dropped caption's -10000 on every key); where it did
// not (the CUDA checks), a value that may be the fill (half the call's mask, or near the dtype's
// limit) gives way to the bound.
TEST(LogitTrend, AMasksFillIsNotALogit) {
  TensorHealth filled_scores = tensor(Role::kS, "Float", 1e9);
  filled_scores.max_positive = 2.5;
  auto s = callLogit(forward({tensor(Role::kQ, "Float", 1), tensor(Role::kK, "Float", 1), filled_scores}));
  ASSERT_TRUE(s);
  EXPECT_EQ(s->source, LogitSource::kScores);
  EXPECT_EQ(s->value, 2.5);

  TensorHealth dropped_caption = tensor(Role::kLSE, "Float", 9997.5);
  dropped_caption.max_positive = 3.1;
  auto lse = callLogit(forward({tensor(Role::kQ, "Float", 1), tensor(Role::kK, "Float", 1), dropped_caption}));
  ASSERT_TRUE(lse);
  EXPECT_EQ(lse->source, LogitSource::kLse);
  EXPECT_EQ(lse->value, 3.1);

  TensorHealth every_key_hidden = tensor(Role::kLSE, "Float", 9997.5);
  every_key_hidden.max_positive = 0;
  EXPECT_FALSE(callLogit(forward({tensor(Role::kQ, "Float", 1), tensor(Role::kK, "Float", 1), every_key_hidden})))
      << "no logit above 0 says nothing of growth";

  auto unmeasured =
      callLogit(forward({tensor(Role::kQ, "Float", 1), tensor(Role::kK, "Float", 1),
                         tensor(Role::kMask, "Float", 10000, "[2,1,1,16]"), tensor(Role::kLSE, "Float", 9997.5)}));
  ASSERT_TRUE(unmeasured);
  EXPECT_EQ(unmeasured->source, LogitSource::kBound) << "an LSE as large as the mask's fill may be the fill";
  EXPECT_DOUBLE_EQ(unmeasured->value, 4.0);
  auto filled =
      callLogit(forward({tensor(Role::kQ, "Float", 1), tensor(Role::kK, "Float", 1), tensor(Role::kS, "Float", 1e9)}));
  ASSERT_TRUE(filled);
  EXPECT_EQ(filled->source, LogitSource::kBound) << "plain-ops scores past d |Q| |K| (16) hold a masked_fill's -1e9";
}

// float64 inputs never overflow the trend's own arithmetic (issue 61: "grew from 0.658 to
// 1.8e+308 (x inf)" on a float64 padding mask of finfo(float64).min).
TEST(LogitTrend, Float64ExtremesNeverOverflowTheTrendsArithmetic) {
  auto filled = callLogit(forward({tensor(Role::kQ, "Double", 0.5), tensor(Role::kK, "Double", 0.5),
                                   tensor(Role::kS, "Double", 1.7976931348623157e308)}));
  ASSERT_TRUE(filled);
  EXPECT_EQ(filled->source, LogitSource::kBound) << "finfo(float64).min is a fill near float64's limit";
  EXPECT_DOUBLE_EQ(filled->value, 1.0);

  EXPECT_FALSE(callLogit(forward({tensor(Role::kQ, "Double", 1e200), tensor(Role::kK, "Double", 1e200)}, "math")))
      << "a bound past the largest double says nothing";

  LogitWatch tiny_start;
  EXPECT_TRUE(tiny_start.observe(0, logit(1e-300, "Double")).empty());
  auto w = tiny_start.observe(5, logit(1e300, "Double"));
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].text().find("inf"), std::string::npos) << w[0].text();
  EXPECT_EQ(w[0].text().find("(x"), std::string::npos)
      << "a factor past the largest double is not said: " << w[0].text();

  LogitWatch near_limit;
  EXPECT_TRUE(near_limit.observe(0, logit(1.7e308, "Double")).empty());
  EXPECT_TRUE(near_limit.observe(1, logit(1.79e308, "Double")).empty()) << "x1.05 is no growth";
  EXPECT_TRUE(near_limit.observe(2, logit(0, "Double")).empty()) << "0 says nothing";
  EXPECT_TRUE(near_limit.observe(3, logit(2000, "Double")).empty()) << "not x10 above its smallest, 1.7e308";
}

TEST(LogitTrend, StepsBeforeTheFirstNonFiniteValue) {
  EXPECT_EQ(stepsBeforeText(7, 25), "18 steps before the first non-finite value");
  EXPECT_EQ(stepsBeforeText(24, 25), "1 step before the first non-finite value");
  EXPECT_EQ(stepsBeforeText(25, 25), "at or after the first non-finite value");
}

TEST(LogitTrend, GrowthWarnsOnceAtTheLevelAndTheFactor) {
  LogitWatch watch;
  EXPECT_TRUE(watch.observe(0, logit(3.5)).empty());
  EXPECT_TRUE(watch.observe(10, logit(999)).empty()) << "below the level: a sharp but healthy attention";
  auto w = watch.observe(20, logit(1300));
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].kind, TrendKind::kGrowth);
  EXPECT_EQ(w[0].from_step, 0);
  EXPECT_EQ(w[0].from_value, 3.5);
  EXPECT_EQ(w[0].step, 20);
  w[0].module = "layers.7.attn";
  EXPECT_EQ(w[0].text(), "layers.7.attn attention logits grew from 3.5 to 1,300 over 20 steps (x370)");
  EXPECT_TRUE(watch.observe(30, logit(9000)).empty()) << "once per layer";
}

TEST(LogitTrend, AHighButSteadyLayerIsNotGrowth) {
  LogitWatch watch;
  watch.observe(0, logit(400));
  EXPECT_TRUE(watch.observe(100, logit(3000)).empty()) << "x7.5 from its own start";
  EXPECT_EQ(watch.observe(200, logit(4000)).size(), 1u) << "x10 reached";
}

TEST(LogitTrend, PrecisionWarnsWhereSixteenBitScoresAreTwoApart) {
  LogitWatch bf16;
  EXPECT_TRUE(bf16.observe(0, logit(255, "BFloat16")).empty());
  auto w = bf16.observe(1, logit(300, "BFloat16"));
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].kind, TrendKind::kPrecision);
  w[0].module = "blocks.0.attn";
  EXPECT_EQ(w[0].text(),
            "blocks.0.attn attention logits reached 300 in bfloat16 scores, where neighbouring scores are 2 apart");
  LogitWatch half;
  EXPECT_TRUE(half.observe(0, logit(2000, "Half")).empty());
  auto h = half.observe(1, logit(4096, "Half"));
  ASSERT_EQ(h.size(), 1u);
  h[0].layer = 3;
  EXPECT_EQ(h[0].text(),
            "layer 3 attention logits reached 4,100 in float16 scores, where neighbouring scores are 2 apart "
            "and overflow (65,504) is x16 away");
  LogitWatch fp32;
  EXPECT_TRUE(fp32.observe(0, logit(900)).empty());
  EXPECT_TRUE(fp32.observe(1, logit(1e6)).size() == 1u && fp32.warned(TrendKind::kGrowth) &&
              !fp32.warned(TrendKind::kPrecision))
      << "float32 scores keep their fraction far past any logit a model reaches";
}

TEST(LogitTrend, ReadableNumbers) {
  EXPECT_EQ(readableNumber(9800), "9,800");
  EXPECT_EQ(readableNumber(9849), "9,800");
  EXPECT_EQ(readableNumber(14.4), "14");
  EXPECT_EQ(readableNumber(3.56), "3.56");
  EXPECT_EQ(readableNumber(65504), "66,000");
  EXPECT_EQ(readableNumber(1234567), "1,200,000");
}

}  // namespace
}  // namespace nanprov
