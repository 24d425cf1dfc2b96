#include "report/edges.h"

#include <gtest/gtest.h>

namespace nanprov::report {
namespace {

TensorHealth tensor(const std::string& role, int64_t nan = 0, int64_t posinf = 0, int64_t neginf = 0) {
  TensorHealth t;
  t.role = *parseRole(role);
  t.numel = 64;
  t.nan = nan;
  t.posinf = posinf;
  t.neginf = neginf;
  return t;
}

CallRecord call(int rank, int64_t step, int64_t start, Phase phase, std::vector<TensorHealth> tensors) {
  CallRecord c;
  c.rank = rank;
  c.step = step;
  c.start_ns = start;
  c.phase = phase;
  c.layer = 0;
  c.tensors = std::move(tensors);
  return c;
}

TEST(EdgeClassification, FiniteInputsNonFiniteOutputIsASourceEdge) {
  CallHealth h = classify(call(0, 0, 0, Phase::kForward, {tensor("Q"), tensor("K"), tensor("V"), tensor("O", 3)}));
  EXPECT_EQ(h.kind, EdgeKind::kSourceEdge);
  EXPECT_TRUE(h.inputs_finite);
  EXPECT_EQ(h.nonfinite_outputs, std::vector<std::string>{"O"});
}

TEST(EdgeClassification, BadInputIsPropagated) {
  CallHealth h = classify(call(0, 0, 0, Phase::kBackward, {tensor("dO", 1), tensor("Q"), tensor("dQ", 5)}));
  EXPECT_EQ(h.kind, EdgeKind::kPropagated);
  EXPECT_EQ(h.nonfinite_inputs, std::vector<std::string>{"dO"});
}

TEST(EdgeClassification, OutputRolesDependOnPhase) {
  // In a backward call O and LSE are inputs: a NaN there is upstream of this call.
  CallHealth h = classify(call(0, 0, 0, Phase::kBackward, {tensor("O", 2), tensor("dQ", 2)}));
  EXPECT_EQ(h.kind, EdgeKind::kPropagated);
}

TEST(EdgeClassification, MaskMinusInfAndMaskedRowLseAreLegal) {
  TensorHealth mask = tensor("mask", 0, 0, 40);
  mask.masked_rows = 2;
  CallHealth h = classify(call(0, 0, 0, Phase::kForward, {tensor("Q"), mask, tensor("O"), tensor("LSE", 0, 0, 8)}));
  EXPECT_EQ(h.kind, EdgeKind::kClean);
  // Without masked rows, -inf in LSE is a fault; NaN in a mask always is.
  h = classify(call(0, 0, 0, Phase::kForward, {tensor("Q"), tensor("LSE", 0, 0, 8)}));
  EXPECT_EQ(h.kind, EdgeKind::kSourceEdge);
  h = classify(call(0, 0, 0, Phase::kForward, {tensor("mask", 1), tensor("O")}));
  EXPECT_EQ(h.kind, EdgeKind::kPropagated);
}

TEST(EdgeClassification, TheKindTheProbesStoreIsClassifysKind) {
  TensorHealth mask = tensor("mask", 0, 0, 40);
  mask.masked_rows = 2;
  const std::vector<CallRecord> calls = {
      call(0, 0, 0, Phase::kForward, {tensor("Q"), tensor("K"), tensor("V"), tensor("O", 3)}),
      call(0, 0, 0, Phase::kBackward, {tensor("dO", 1), tensor("Q"), tensor("dQ", 5)}),
      call(0, 0, 0, Phase::kBackward, {tensor("O", 2), tensor("dQ", 2)}),
      call(0, 0, 0, Phase::kForward, {tensor("Q"), mask, tensor("O"), tensor("LSE", 0, 0, 8)}),
      call(0, 0, 0, Phase::kForward, {tensor("Q"), tensor("LSE", 0, 0, 8)}),
      call(0, 0, 0, Phase::kForward, {tensor("mask", 1), tensor("O")}),
      call(0, 0, 0, Phase::kForward, {tensor("Q"), tensor("O")}),
  };
  for (const CallRecord& c : calls) EXPECT_EQ(edgeKindOf(c), classify(c).kind);
}

TEST(FirstEdge, EarliestAcrossRanksByStepThenTime) {
  std::vector<CallRecord> calls = {
      call(0, 0, 10, Phase::kForward, {tensor("Q"), tensor("O")}),
      call(1, 0, 20, Phase::kForward, {tensor("Q"), tensor("O")}),
      call(1, 1, 5, Phase::kBackward, {tensor("dO"), tensor("dQ", 4)}),  // first edge: rank 1
      call(0, 1, 30, Phase::kForward, {tensor("Q"), tensor("O", 1)}),    // later source edge
      call(0, 2, 1, Phase::kForward, {tensor("Q", 9), tensor("O", 9)}),  // propagated
  };
  Findings f = analyze(calls);
  ASSERT_TRUE(f.first.has_value());
  EXPECT_EQ(*f.first, 2u);
  EXPECT_EQ(f.origin, Origin::kAttention);
  EXPECT_EQ(f.propagation.calls, 3);
  EXPECT_EQ(f.propagation.ranks, 2);
  EXPECT_EQ(callName(calls[2]), "rank1:layer0:call0");
}

TEST(FirstEdge, UpstreamOriginWhenTheFirstBadValueArrivesAsInput) {
  std::vector<CallRecord> calls = {
      call(0, 0, 10, Phase::kForward, {tensor("Q", 0, 3), tensor("O", 12)}),
      call(0, 0, 20, Phase::kForward, {tensor("Q"), tensor("O", 1)}),
  };
  Findings f = analyze(calls);
  EXPECT_EQ(*f.first, 0u);
  EXPECT_EQ(f.origin, Origin::kUpstream);
  EXPECT_FALSE(f.first_health.inputs_finite);
  EXPECT_EQ(*f.first_source, 1u);
}

TEST(FirstEdge, CleanRunHasNoEdge) {
  Findings f = analyze({call(0, 0, 0, Phase::kForward, {tensor("Q"), tensor("O")})});
  EXPECT_FALSE(f.first.has_value());
  EXPECT_EQ(f.propagation.calls, 0);
}

}  // namespace
}  // namespace nanprov::report
