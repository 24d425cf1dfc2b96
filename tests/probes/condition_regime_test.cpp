#include "probes/core/condition_regime.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>

#include "probes/core/capture_policy.h"

namespace nanprov::probes {
namespace {

// A forward call with a float mask whose largest |x| is `mask`, Q and K of `qk` each, and O of `out`.
CallEvent forward(double mask, double qk = 1, double out = 1, int64_t masked_rows = 0, double lse = 3) {
  CallEvent c;
  c.tensors = {TensorHealth{.role = Role::kQ, .dtype = DtypeName::ofStatic("Float"), .numel = 8, .max_abs = qk},
               TensorHealth{.role = Role::kK, .dtype = DtypeName::ofStatic("Float"), .numel = 8, .max_abs = qk},
               TensorHealth{.role = Role::kMask,
                            .dtype = DtypeName::ofStatic("Float"),
                            .numel = 8,
                            .max_abs = mask,
                            .masked_rows = masked_rows},
               TensorHealth{.role = Role::kO, .dtype = DtypeName::ofStatic("Float"), .numel = 8, .max_abs = out},
               TensorHealth{.role = Role::kLSE, .dtype = DtypeName::ofStatic("Float"), .numel = 2, .max_abs = lse}};
  return c;
}

std::string change(const CallEvent& judged, const CallEvent& now) {
  return regimeChange(regimeOf(judged), regimeOf(now));
}

TEST(ConditionRegime, AMaskValueArrivingFullyMaskedRowsAndTheLseLineAreNewRegimes) {
  EXPECT_EQ(change(forward(0), forward(0)), "");
  EXPECT_EQ(change(forward(0), forward(30000)), "the mask's largest |x| went from 0 to 3e+04");
  EXPECT_EQ(change(forward(10000), forward(30000)), "") << "the same order of magnitude";
  EXPECT_EQ(change(forward(1e4), forward(1e9)), "the mask's largest |x| went from 1e+04 to 1e+09");
  EXPECT_EQ(change(forward(0), forward(0, 1, 1, 4)), "query rows with every key masked appeared");
  EXPECT_EQ(change(forward(0, 1, 1, 4), forward(0)), "no query row has every key masked any more");
  EXPECT_EQ(change(forward(0, 1, 1, 0, 80), forward(0, 1, 1, 0, 95)),
            "a row's |LSE| went past 88.7 (exp(-LSE) leaves float32)");
}

TEST(ConditionRegime, MagnitudesMoveTheRegimeOnlyTenfoldSoACleanRunDoesNotFlap) {
  EXPECT_EQ(change(forward(0, 3), forward(0, 3.2)), "") << "logits 9 -> 10.2: across a decade's edge, not tenfold";
  EXPECT_EQ(change(forward(0, 3), forward(0, 9.6)), "the logits' bound went from 9 to 92.2");
  EXPECT_EQ(change(forward(0, 1, 2), forward(0, 1, 19)), "");
  EXPECT_EQ(change(forward(0, 1, 2), forward(0, 1, 25)), "the output's largest |x| went from 2 to 25");
  CallEvent zero = forward(0);
  zero.tensors[3].all_zero = true;
  zero.tensors[3].max_abs = 0;
  EXPECT_EQ(change(forward(0), zero), "the output became exactly zero");
  // A bool mask has no magnitude: only its hidden rows count.
  CallEvent boolean = forward(0), boolean_later = forward(0);
  boolean.tensors[2].dtype = boolean_later.tensors[2].dtype = DtypeName::ofStatic("Bool");
  boolean_later.tensors[2].max_abs = 1;
  EXPECT_EQ(change(boolean, boolean_later), "");
}

// The audit judges a key again at the first call of a new regime, whatever the rotation's budget,
// and says why; the same regime is left to the rotation.
TEST(ConditionRegime, TheAuditJudgesANewRegimeAtItsFirstCallWhateverTheBudget) {
  CapturePlan plan;
  plan.first_source_edge = false;
  plan.audit.on = true;
  plan.audit.budget_percent = 1;
  CapturePolicy policy;
  AuditProgress progress;
  policy.configure(plan, [&] { return progress; }, [] { return int64_t{0}; });  // no time passes
  auto at = [](int64_t step, double mask) {
    CallEvent c = forward(mask);
    c.step = step;
    return c;
  };
  ASSERT_TRUE(policy.triggerFor(at(0, 0), 7).has_value()) << "the first pass";
  ASSERT_TRUE(policy.reserve(100, CaptureTrigger::kAudit, 7));
  policy.addAuditCost(1'000'000);  // a rotation's cost, with no time passing: none is affordable
  std::string why;
  EXPECT_FALSE(policy.triggerFor(at(1, 0), 7, &why).has_value()) << "same regime, the rotation is held back";
  EXPECT_FALSE(policy.triggerFor(at(2, 0), 7, &why).has_value());
  EXPECT_TRUE(policy.triggerFor(at(3, 30000), 7, &why).has_value());
  EXPECT_EQ(why, "the mask's largest |x| went from 0 to 3e+04 at step 3");
  ASSERT_TRUE(policy.reserve(100, CaptureTrigger::kAudit, 7));
  EXPECT_FALSE(policy.triggerFor(at(4, 30000), 7).has_value()) << "judged in this regime already";
  // A padding mask present in some batches and not in others: each regime was judged once.
  EXPECT_FALSE(policy.triggerFor(at(5, 0), 7).has_value()) << "the first regime, judged at step 0";
  EXPECT_FALSE(policy.triggerFor(at(6, 30000), 7).has_value());
  EXPECT_EQ(policy.rotationCounts().regime_changes, 1);
  // A judgement the audit's byte budget refuses is taken back whole, and tried again.
  EXPECT_TRUE(policy.triggerFor(at(7, 1e9), 7, &why).has_value());
  EXPECT_EQ(why, "the mask's largest |x| went from 3e+04 to 1e+09 at step 7");
  EXPECT_EQ(policy.rotationCounts().regime_changes, 2);
  ASSERT_FALSE(policy.reserve(int64_t{1} << 60, CaptureTrigger::kAudit, 7));
  EXPECT_EQ(policy.rotationCounts().regime_changes, 1);
  EXPECT_TRUE(policy.triggerFor(at(8, 1e9), 7).has_value()) << "still a new regime";
}

// Every regime a key met is kept for the report, with when it was seen and last judged: one whose
// judgement the byte budget refused stays seen and never judged, and once the slots are full a
// judged regime gives way before one never judged.
TEST(ConditionRegime, TheRegimesSeenAreKeptWithTheStepEachWasLastJudgedAt) {
  CapturePlan plan;
  plan.first_source_edge = false;
  plan.audit.on = true;
  CapturePolicy policy;
  AuditProgress progress;
  policy.configure(plan, [&] { return progress; }, [] { return int64_t{0}; });
  auto at = [](int64_t step, double mask, Phase phase = Phase::kForward) {
    CallEvent c = forward(mask);
    c.step = step;
    c.layer = 4;
    c.phase = phase;
    return c;
  };
  ASSERT_TRUE(policy.triggerFor(at(0, 0), 7).has_value());
  ASSERT_TRUE(policy.reserve(100, CaptureTrigger::kAudit, 7));
  policy.addAuditCost(1'000'000);  // a rotation's cost, with no time passing: the rotation is held back
  EXPECT_FALSE(policy.triggerFor(at(1, 0), 7).has_value());
  EXPECT_FALSE(policy.triggerFor(at(2, 0), 7).has_value());
  ASSERT_TRUE(policy.triggerFor(at(3, 30000), 7).has_value()) << "a mask band arrives";
  ASSERT_FALSE(policy.reserve(int64_t{1} << 60, CaptureTrigger::kAudit, 7)) << "and does not fit";
  ASSERT_TRUE(policy.triggerFor(at(0, 0, Phase::kBackward), 9).has_value()) << "another key";

  const std::map<std::string, AuditRegime> regimes = policy.regimes();
  ASSERT_EQ(regimes.size(), 3u);
  const AuditRegime& before = regimes.at("k0.r0");
  EXPECT_EQ(before.layer, 4);
  EXPECT_EQ(before.phase, Phase::kForward);
  EXPECT_EQ(before.first_seen, 0);
  EXPECT_EQ(before.last_seen, 2);
  EXPECT_EQ(before.calls, 3);
  EXPECT_EQ(before.last_judged, 0);
  EXPECT_EQ(before.conditions, "mask |x| 0, logits 1, O 1");
  const AuditRegime& band = regimes.at("k0.r1");
  EXPECT_EQ(band.first_seen, 3);
  EXPECT_EQ(band.last_judged, -1) << "seen, and its judgement taken back";
  EXPECT_EQ(band.conditions, "mask |x| 3e+04, logits 1, O 1");
  EXPECT_EQ(regimes.at("k1.r0").phase, Phase::kBackward);

  // Eight slots a key: nine more regimes, each a tenfold mask, each judged but the band's. The
  // band, never judged, is still there at the end.
  for (int i = 0; i < 9; ++i) {
    const double mask = std::pow(10.0, 6 + i);
    ASSERT_TRUE(policy.triggerFor(at(10 + i, mask), 7).has_value());
    ASSERT_TRUE(policy.reserve(100, CaptureTrigger::kAudit, 7));
  }
  int never_judged = 0, of_key = 0;
  for (const auto& [slot, r] : policy.regimes()) {
    if (!slot.starts_with("k0.")) continue;
    ++of_key;
    if (r.last_judged < 0) {
      ++never_judged;
      EXPECT_EQ(r.first_seen, 3);
    }
  }
  EXPECT_EQ(of_key, 8);
  EXPECT_EQ(never_judged, 1);
}

}  // namespace
}  // namespace nanprov::probes
