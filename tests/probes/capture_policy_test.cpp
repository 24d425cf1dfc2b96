#include "probes/capture_policy.h"

#include <gtest/gtest.h>

namespace nanprov {
namespace {

CallRecord call(int64_t seq, int64_t layer, Phase phase, int64_t nan_out, int64_t nan_in = 0) {
  CallRecord c;
  c.seq = seq;
  c.layer = layer;
  c.phase = phase;
  std::string in = phase == Phase::kForward ? "Q" : "dO";
  std::string out = phase == Phase::kForward ? "O" : "dQ";
  c.tensors = {TensorHealth{.role = in, .numel = 8, .nan = nan_in}, TensorHealth{.role = out, .numel = 8, .nan = nan_out}};
  return c;
}

TEST(CapturePolicy, TakesOnlyTheFirstSourceEdgeByDefault) {
  CapturePolicy policy;
  policy.configure(CapturePlan{});
  EXPECT_EQ(policy.triggerFor(call(0, 0, Phase::kForward, 0)), "") << "clean";
  EXPECT_EQ(policy.triggerFor(call(1, 0, Phase::kForward, 3, 1)), "") << "propagated: its input was bad";
  EXPECT_EQ(policy.triggerFor(call(2, 1, Phase::kBackward, 3)), "first-source-edge");
  EXPECT_EQ(policy.triggerFor(call(3, 1, Phase::kBackward, 3)), "") << "only the first";
}

TEST(CapturePolicy, SelectorsAndSamplingAddCallsAndTheFirstEdgeCanBeTurnedOff) {
  CapturePlan plan;
  plan.first_source_edge = false;
  plan.every = 10;
  auto selector = parseCaptureSelector("layer=2,phase=bwd");
  ASSERT_TRUE(selector.ok()) << selector.status().message();
  plan.selectors.push_back(*selector);
  CapturePolicy policy;
  policy.configure(plan);
  EXPECT_EQ(policy.triggerFor(call(5, 1, Phase::kBackward, 3)), "") << "first edge is off";
  EXPECT_EQ(policy.triggerFor(call(6, 2, Phase::kBackward, 0)), "selector");
  EXPECT_EQ(policy.triggerFor(call(7, 2, Phase::kForward, 0)), "") << "wrong phase";
  EXPECT_EQ(policy.triggerFor(call(20, 0, Phase::kForward, 0)), "every");
}

TEST(CapturePolicy, TheBudgetIsNeverExceeded) {
  CapturePlan plan;
  plan.budget_bytes = 100;
  CapturePolicy policy;
  policy.configure(plan);
  EXPECT_TRUE(policy.reserve(60));
  EXPECT_FALSE(policy.reserve(41)) << "60 + 41 > 100";
  EXPECT_TRUE(policy.reserve(40));
  EXPECT_FALSE(policy.reserve(1));
}

// The audit takes the first clean call of each signature, and again once --audit-every steps have
// passed; edges are not audited (they are findings already), and its budget is its own.
TEST(CapturePolicy, AuditTakesEachSignatureOnceThenEveryNSteps) {
  CapturePlan plan;
  plan.first_source_edge = false;
  plan.audit.on = true;
  plan.audit.every_steps = 2;
  plan.audit.budget_bytes = 10;
  plan.budget_bytes = 0;
  CapturePolicy policy;
  policy.configure(plan);
  ASSERT_TRUE(policy.auditing());
  auto at = [](int64_t seq, int64_t step, int64_t nan_out = 0) {
    CallRecord c = call(seq, 0, Phase::kForward, nan_out);
    c.step = step;
    return c;
  };
  EXPECT_EQ(policy.triggerFor(at(0, 0), 1), "audit");
  EXPECT_EQ(policy.triggerFor(at(1, 0), 1), "") << "audited this step";
  EXPECT_EQ(policy.triggerFor(at(2, 0), 2), "audit") << "another signature";
  EXPECT_EQ(policy.triggerFor(at(3, 1), 1), "") << "one step later";
  EXPECT_EQ(policy.triggerFor(at(4, 2, 5), 3), "") << "a source edge is not audited";
  EXPECT_EQ(policy.triggerFor(at(5, 2), 1), "audit") << "two steps later";
  EXPECT_EQ(policy.triggerFor(at(6, 2)), "") << "no key: audits are off for this call";
  EXPECT_TRUE(policy.reserve(10, "audit"));
  EXPECT_FALSE(policy.reserve(1, "audit")) << "the audit budget is spent";
  EXPECT_FALSE(policy.reserve(1, "selector")) << "and the capture budget is its own (0 here)";

  CapturePolicy off;
  off.configure(CapturePlan{});
  EXPECT_FALSE(off.auditing());
  EXPECT_EQ(off.triggerFor(at(0, 0), 1), "");
}

TEST(CapturePolicy, BadSelectorsSayWhatIsWrong) {
  for (const char* text : {"", "layer", "layer=x", "tensor=dQ", "phase=sideways"}) {
    auto s = parseCaptureSelector(text);
    ASSERT_FALSE(s.ok()) << text;
    EXPECT_NE(s.status().message().find("bad --capture"), std::string::npos) << s.status().message();
  }
  auto s = parseCaptureSelector("rank=1,layer=33,step=22,call=45,phase=bwd");
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_TRUE(s->matches(1, 33, 22, 45, Phase::kBackward));
  EXPECT_FALSE(s->matches(0, 33, 22, 45, Phase::kBackward));
}

}  // namespace
}  // namespace nanprov
