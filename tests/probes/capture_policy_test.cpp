#include "probes/core/capture_policy.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "base/records/call_health.h"

namespace nanprov::probes {
namespace {

// The trigger's name, "" for none: what the store would say.
std::string said(std::optional<CaptureTrigger> trigger) { return trigger ? captureTriggerName(*trigger) : ""; }

CallEvent call(int64_t seq, int64_t layer, Phase phase, int64_t nan_out, int64_t nan_in = 0) {
  CallEvent c;
  c.seq = seq;
  c.layer = layer;
  c.phase = phase;
  Role in = phase == Phase::kForward ? Role::kQ : Role::kdO;
  Role out = phase == Phase::kForward ? Role::kO : Role::kdQ;
  c.tensors = {TensorHealth{.role = in, .numel = 8, .nan = nan_in},
               TensorHealth{.role = out, .numel = 8, .nan = nan_out}};
  c.health = static_cast<int>(edgeKindOf(c));  // as the probes classify a call before offering it
  return c;
}

TEST(CapturePolicy, TakesOnlyTheFirstSourceEdgeByDefault) {
  CapturePolicy policy;
  policy.configure(CapturePlan{});
  EXPECT_EQ(said(policy.triggerFor(call(0, 0, Phase::kForward, 0))), "") << "clean";
  EXPECT_EQ(said(policy.triggerFor(call(1, 0, Phase::kForward, 3, 1))), "") << "propagated: its input was bad";
  EXPECT_EQ(said(policy.triggerFor(call(2, 1, Phase::kBackward, 3))), "first-source-edge");
  EXPECT_EQ(said(policy.triggerFor(call(3, 1, Phase::kBackward, 3))), "") << "only the first";
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
  EXPECT_EQ(said(policy.triggerFor(call(5, 1, Phase::kBackward, 3))), "") << "first edge is off";
  EXPECT_EQ(said(policy.triggerFor(call(6, 2, Phase::kBackward, 0))), "selector");
  EXPECT_EQ(said(policy.triggerFor(call(7, 2, Phase::kForward, 0))), "") << "wrong phase";
  EXPECT_EQ(said(policy.triggerFor(call(20, 0, Phase::kForward, 0))), "every");
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

// The audit's first pass takes every key (signature, layer, phase: auditKey() hashes them) at its
// first clean call; edges are not audited (they are findings already); its budget is its own.
TEST(CapturePolicy, AuditTakesEveryKeyAtItsFirstCleanCall) {
  CapturePlan plan;
  plan.first_source_edge = false;
  plan.audit.on = true;
  plan.audit.budget_bytes = 10;
  plan.budget_bytes = 0;
  CapturePolicy policy;
  policy.configure(plan);
  ASSERT_TRUE(policy.auditing());
  auto at = [](int64_t seq, int64_t step, int64_t nan_out = 0) {
    CallEvent c = call(seq, 0, Phase::kForward, nan_out);
    c.step = step;
    return c;
  };
  EXPECT_EQ(said(policy.triggerFor(at(0, 0, 5), 1)), "") << "a source edge is not audited";
  EXPECT_EQ(said(policy.triggerFor(at(1, 0), 1)), "audit") << "the key's first clean call";
  EXPECT_EQ(said(policy.triggerFor(at(2, 0), 1)), "") << "judged already";
  EXPECT_EQ(said(policy.triggerFor(at(3, 0), 2)), "audit") << "another key";
  EXPECT_EQ(said(policy.triggerFor(at(4, 1), 1)), "") << "no rotation without the judge's progress";
  EXPECT_EQ(said(policy.triggerFor(at(5, 2))), "") << "no key: audits are off for this call";
  EXPECT_TRUE(policy.reserve(10, CaptureTrigger::kAudit, 1));
  EXPECT_FALSE(policy.reserve(1, CaptureTrigger::kAudit, 2)) << "the judge has not caught up with the 10 bytes waiting";
  EXPECT_EQ(said(policy.triggerFor(at(6, 1), 2)), "audit") << "a key whose audit did not fit is tried again";
  EXPECT_FALSE(policy.reserve(1, CaptureTrigger::kSelector)) << "and the capture budget is its own (0 here)";

  CapturePolicy off;
  off.configure(CapturePlan{});
  EXPECT_FALSE(off.auditing());
  EXPECT_EQ(said(off.triggerFor(at(0, 0), 1)), "");
}

// After the first pass, each step audits the layer judged least recently (both its phases), so
// every layer comes round every (layers) steps; --audit-every N instead takes every call of every
// N-th step.
TEST(CapturePolicy, AuditRotatesThroughTheLayersOrTakesEveryNthStep) {
  auto at = [](int64_t seq, int64_t step, int64_t layer, Phase phase) {
    CallEvent c = call(seq, layer, phase, 0);
    c.step = step;
    return c;
  };
  auto keyOf = [](int64_t layer, Phase phase) {
    return static_cast<uint64_t>(layer * 2 + (phase == Phase::kBackward));
  };
  CapturePlan plan;
  plan.first_source_edge = false;
  plan.audit.on = true;
  plan.audit.budget_percent = kUnboundedAuditPercent;
  CapturePolicy rotating;
  rotating.configure(plan);
  int64_t seq = 0;
  std::map<int64_t, std::vector<int64_t>> layers_by_step;  // step → layers audited in it
  int64_t by_rotation = 0;  // audits said to be the rotation's: their judging is its budget's
  for (int64_t step = 0; step < 7; ++step) {
    for (int64_t layer : {0, 1, 2}) {
      for (Phase phase : {Phase::kForward, Phase::kBackward}) {
        bool rotation = false;
        const std::string why =
            said(rotating.triggerFor(at(seq++, step, layer, phase), keyOf(layer, phase), nullptr, &rotation));
        by_rotation += rotation;
        EXPECT_TRUE(!rotation || (why == "audit" && step > 0)) << "step " << step;
        if (why == "audit" && phase == Phase::kForward) layers_by_step[step].push_back(layer);
      }
    }
  }
  EXPECT_EQ(by_rotation, 12) << "6 rotations, forward and backward; the first pass is not the rotation's";
  EXPECT_EQ(layers_by_step[0], (std::vector<int64_t>{0, 1, 2})) << "the first pass";
  for (int64_t step = 1; step < 7; ++step) {
    EXPECT_EQ(layers_by_step[step], std::vector<int64_t>{(step - 1) % 3}) << "step " << step;
  }
  EXPECT_EQ(rotating.rotationCounts().rotations, 6);

  plan.audit.every_steps = 2;
  CapturePolicy every;
  every.configure(plan);
  std::vector<std::string> got;
  for (int64_t step = 0; step < 5; ++step)
    got.push_back(said(every.triggerFor(at(seq++, step, 1, Phase::kForward), 7)));
  EXPECT_EQ(got, (std::vector<std::string>{"audit", "", "audit", "", "audit"}));
}

// Under a budget, a rotation starts only when the judge has judged the rotation's captures (not
// necessarily the first pass's) and the audit's time (the training thread's copies plus the
// judge's) is within its share of the run.
TEST(CapturePolicy, TheBudgetHoldsTheRotationBackUntilTheJudgeAndTheTimeAllow) {
  AuditProgress progress;
  int64_t now = 0;
  CapturePlan plan;
  plan.first_source_edge = false;
  plan.audit.on = true;
  plan.audit.budget_percent = 1;
  CapturePolicy policy;
  policy.configure(plan, [&] { return progress; }, [&] { return now; });
  auto at = [](int64_t seq, int64_t step) {
    CallEvent c = call(seq, 0, Phase::kForward, 0);
    c.step = step;
    c.device = Device::fromIndex(0);  // on a GPU the judge runs where the training does
    return c;
  };
  ASSERT_EQ(said(policy.triggerFor(at(0, 0), 1)), "audit");
  ASSERT_TRUE(policy.reserve(100, CaptureTrigger::kAudit, 1));
  policy.addAuditCost(1'000'000);  // 1 ms on the training thread
  now = 1'000'000'000;             // 1 s later
  EXPECT_EQ(said(policy.triggerFor(at(1, 1), 1)), "audit")
      << "the first pass's capture, not judged yet, holds nothing back";
  ASSERT_TRUE(policy.reserve(100, CaptureTrigger::kAudit, 1));
  now = 1'500'000'000;
  EXPECT_EQ(said(policy.triggerFor(at(2, 2), 1)), "") << "the judge has not judged the rotation's capture yet";
  progress = {.judged = 2, .judge_ns = 20'000'000};  // judged, in 20 ms: 21 ms > 1% of 1.5 s
  EXPECT_EQ(said(policy.triggerFor(at(3, 3), 1)), "");
  now = 3'000'000'000;  // 21 ms <= 1% of 3 s
  EXPECT_EQ(said(policy.triggerFor(at(4, 4), 1)), "audit");
  EXPECT_EQ(policy.rotationCounts().held_back, 2);
  EXPECT_EQ(policy.rotationCounts().rotations, 2);

  // On the CPU the judge is a niced process of its own: only the training thread's share counts,
  // and the rotation waits for the judge to finish the last one.
  CapturePolicy cpu;
  progress = {};
  now = 0;
  cpu.configure(plan, [&] { return progress; }, [&] { return now; });
  auto on_cpu = [](int64_t seq, int64_t step) {
    CallEvent c = call(seq, 0, Phase::kForward, 0);
    c.step = step;
    return c;
  };
  ASSERT_EQ(said(cpu.triggerFor(on_cpu(0, 0), 1)), "audit");
  ASSERT_TRUE(cpu.reserve(100, CaptureTrigger::kAudit, 1));
  now = 1'000'000'000;
  EXPECT_EQ(said(cpu.triggerFor(on_cpu(1, 1), 1)), "audit");
  ASSERT_TRUE(cpu.reserve(100, CaptureTrigger::kAudit, 1));
  EXPECT_EQ(said(cpu.triggerFor(on_cpu(2, 2), 1)), "") << "the judge has not judged the rotation's capture yet";
  progress = {.judged = 2, .judge_ns = 500'000'000};  // half a second of the judge's own
  EXPECT_EQ(said(cpu.triggerFor(on_cpu(3, 3), 1)), "audit");

  // The first pass is judged whatever it costs, and not charged to the rotation: a small run's
  // slow first captures never hold the rotation back. The rotation's own takes are charged.
  CapturePolicy slow_first;
  progress = {};
  now = 0;
  slow_first.configure(plan, [&] { return progress; }, [&] { return now; });
  ASSERT_EQ(said(slow_first.triggerFor(on_cpu(0, 0), 1)), "audit");
  ASSERT_TRUE(slow_first.reserve(100, CaptureTrigger::kAudit, 1));
  slow_first.addAuditCost(500'000'000, 1);  // the first pass's capture took half a second
  now = 1'000'000'000;
  progress = {.judged = 1};
  EXPECT_EQ(said(slow_first.triggerFor(on_cpu(1, 1), 1)), "audit") << "the first pass's cost is not the rotation's";
  ASSERT_TRUE(slow_first.reserve(100, CaptureTrigger::kAudit, 1));
  slow_first.addAuditCost(500'000'000, 1);  // the rotation's: charged
  progress = {.judged = 2};
  now = 2'000'000'000;
  EXPECT_EQ(said(slow_first.triggerFor(on_cpu(2, 2), 1)), "") << "half a second is more than 1% of 2 s";
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
}  // namespace nanprov::probes
