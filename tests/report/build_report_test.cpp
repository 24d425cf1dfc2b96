#include "report/build_report.h"

#include <gtest/gtest.h>

#include "tests/report/synthetic_run.h"

namespace nanprov::report {
namespace {

using synthetic::forward;
using synthetic::runOf;
using synthetic::upstream;

// Attention made the values: the edge carries what every rendering shows of it, worked out here
// (its trail, its capture's path under its rank's directory, its mesh), and the source edge is it.
TEST(BuildReport, AnEdgeAttentionMadeCarriesItsTrailCaptureAndMesh) {
  store::RunData run = runOf({forward(0, 0, 1, 0, 0, 2e4), forward(0, 1, 1, 1, /*o_nan=*/5, 3e4)});
  run.ranks[0].counters.mesh = "dp=0,tp=1";
  run.captures = {CaptureRecord{
      .rank = 0, .seq = 1, .trigger = CaptureTrigger::kFirstSourceEdge, .path = "captures/c.safetensors"}};
  auto report = buildReport(run);
  ASSERT_TRUE(report.ok()) << report.status().message();
  ASSERT_TRUE(report->first_edge);
  const EdgeCall& edge = *report->first_edge;
  EXPECT_EQ(edge.call.seq, 1);
  EXPECT_EQ(report->origin, Origin::kAttention);
  EXPECT_EQ(edge.health.kind, EdgeKind::kSourceEdge);
  EXPECT_EQ(edge.largest_finite_input, 3e4);
  EXPECT_EQ(edge.mesh, "dp=0,tp=1");
  ASSERT_TRUE(edge.capture);
  EXPECT_EQ(edge.capture->path, "runs/synthetic/captures/c.safetensors");
  EXPECT_EQ(edge.kernels.attribution, "the ATen CPU op");
  ASSERT_TRUE(report->input_trail);
  ASSERT_TRUE(report->input_trail->previous);
  EXPECT_EQ(report->input_trail->previous->seq, 0) << "the forward before it in its step, on its rank";
  EXPECT_EQ(report->input_trail->previous_largest, 2e4);
  ASSERT_TRUE(report->first_source_edge);
  EXPECT_EQ(report->first_source_edge->call.seq, 1);
  EXPECT_EQ(report->propagation.calls, 1);
  EXPECT_EQ(report->conclusion.outcome, Outcome::kEdgeFound);
  EXPECT_EQ(report->run.calls, 2);
  EXPECT_EQ(report->run.steps, 4);
  EXPECT_FALSE(report->page) << "the page's sources are read only when asked for";
}

// Values from upstream: no trail (attention did not make them), and the later source edge is its
// own call, with its own capture decision.
TEST(BuildReport, UpstreamValuesNameTheLaterSourceEdgeApart) {
  store::RunData run = runOf({upstream(0, 0, 1, 0), forward(0, 1, 2, 1, /*o_nan=*/5)});
  run.captures = {CaptureRecord{.rank = 0, .seq = 1, .skipped = "the capture budget was spent"}};
  auto report = buildReport(run);
  ASSERT_TRUE(report.ok());
  ASSERT_TRUE(report->first_edge);
  EXPECT_EQ(report->origin, Origin::kUpstream);
  EXPECT_EQ(report->first_edge->health.kind, EdgeKind::kPropagated);
  EXPECT_FALSE(report->input_trail);
  EXPECT_FALSE(report->first_edge->capture);
  ASSERT_TRUE(report->first_source_edge);
  EXPECT_EQ(report->first_source_edge->call.seq, 1);
  EXPECT_EQ(report->first_source_edge->health.kind, EdgeKind::kSourceEdge);
  ASSERT_TRUE(report->first_source_edge->capture);
  EXPECT_EQ(report->first_source_edge->capture->path, "");
  EXPECT_EQ(report->first_source_edge->capture->skipped, "the capture budget was spent");
  EXPECT_EQ(report->propagation.calls, 2);
  // The trends say how long before the first non-finite step each warning came: the edge's.
  EXPECT_EQ(report->trends.nonfinite_step, 1);
}

// A clean run has no edge, and the earliest non-finite step comes from the gradient sentinel.
TEST(BuildReport, TheSentinelsStepIsTheFirstNonFiniteOneWithoutAnEdge) {
  store::RunData run = runOf({forward(0, 0, 0, 0), forward(0, 1, 1, 0)});
  auto clean = buildReport(run);
  ASSERT_TRUE(clean.ok());
  EXPECT_FALSE(clean->first_edge);
  EXPECT_FALSE(clean->first_source_edge);
  EXPECT_EQ(clean->conclusion.outcome, Outcome::kClean);
  EXPECT_FALSE(clean->trends.nonfinite_step);
  run.sentinel = {SentinelRecord{.rank = 0, .step = 1, .parameter = "head.weight"}};
  auto sentinel = buildReport(run);
  ASSERT_TRUE(sentinel.ok());
  EXPECT_EQ(sentinel->trends.nonfinite_step, 1);
  EXPECT_TRUE(sentinel->conclusion.sentinel_first);
}

}  // namespace
}  // namespace nanprov::report
