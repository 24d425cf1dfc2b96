#include "report/layer_trends.h"

#include <gtest/gtest.h>

#include "store/reader.h"

namespace nanprov::report {
namespace {

TrendPoint point(int64_t layer, int64_t step, int64_t width, double logit) {
  TrendPoint p;
  p.layer = layer, p.step = step, p.last_step = step + width - 1, p.bucket_steps = width, p.calls = 1;
  p.module = "layers." + std::to_string(layer) + ".attn";
  p.logit = logit;
  return p;
}

// Two ranks' buckets of one layer merge into the widest width, each point the largest; the layers
// are ordered by how much their logits grew, and the warnings by step, then rank.
TEST(LayerTrends, RanksMergeIntoTheWidestBucketsAndLayersOrderByGrowth) {
  store::RunData run;
  store::RankInfo r0, r1;
  r0.rank = 0, r1.rank = 1;
  r0.trends = {point(0, 0, 1, 10), point(0, 1, 1, 12), point(1, 0, 2, 5), point(1, 2, 2, 500)};
  r1.trends = {point(0, 0, 2, 11)};
  TrendWarning late{.rank = 1, .layer = 1, .step = 3, .value = 500, .from_step = 0, .from_value = 5};
  TrendWarning early{.rank = 0, .layer = 1, .step = 2, .value = 400, .from_step = 0, .from_value = 5};
  r0.trend_warnings = {late};
  r1.trend_warnings = {early};
  run.ranks = {r0, r1};
  const Trends t = trendsOf(run, /*nonfinite_step=*/6);
  ASSERT_EQ(t.layers.size(), 2u);
  const LayerTrend& layer0 = t.layers[0];
  EXPECT_EQ(layer0.bucket_steps, 2);
  ASSERT_EQ(layer0.points.size(), 1u) << "steps 0 and 1 of rank 0 fall in rank 1's bucket of two";
  EXPECT_EQ(layer0.points[0].logit, 12);
  EXPECT_EQ(layer0.points[0].calls, 3);
  EXPECT_EQ(t.by_growth, (std::vector<size_t>{1, 0})) << "layer 1 grew x100, layer 0 not at all";
  EXPECT_EQ(t.first_step, 0);
  EXPECT_EQ(t.last_step, 3);
  ASSERT_EQ(t.warnings.size(), 2u);
  EXPECT_EQ(t.warnings[0].step, 2);
  const std::string text = trendsText(t);
  EXPECT_NE(text.find("  trend warning: rank0 step 2: "), std::string::npos) << text;
  EXPECT_NE(text.find("(4 steps before the first non-finite value)"), std::string::npos) << text;
  EXPECT_NE(text.find("attention logits, largest per layer: layers.1.attn 5 at step 0, peak 500 at step 3"),
            std::string::npos)
      << text;
  const nlohmann::json j = trendsJson(t);
  EXPECT_EQ(j["first_nonfinite_step"], 6);
  EXPECT_EQ(j["warnings"][0]["steps_before_first_nonfinite"], 4);
  EXPECT_EQ(j["layers"][0]["points"][0]["dQ"], nullptr) << "no call held dQ";
}

TEST(LayerTrends, AStoreWithoutTrendsSaysNothing) {
  const Trends t = trendsOf(store::RunData{}, std::nullopt);
  EXPECT_TRUE(t.layers.empty());
  EXPECT_EQ(trendsText(t), "");
  EXPECT_EQ(trendsJson(t)["first_nonfinite_step"], nullptr);
}

}  // namespace
}  // namespace nanprov::report
