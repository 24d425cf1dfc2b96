#include "replay/verdict.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "replay/replay_result.h"

namespace nanprov::replay {
namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();

// G: a smooth [1, 2, 128, 4] tensor; L: G off by `yard` everywhere.
struct Case {
  Grid grid{1, 2, 128, 4};
  std::vector<double> g, l;
  explicit Case(double yard = 1e-3) {
    for (int64_t i = 0; i < grid.size(); ++i) g.push_back(std::sin(0.1 * static_cast<double>(i)) + 0.5);
    for (double x : g) l.push_back(x + yard);
  }
  std::vector<double> off(double by) const {
    std::vector<double> b = g;
    for (double& x : b) x += by;
    return b;
  }
};

TEST(Verdict, WithinTheYardstickIsOkAndFarOutsideIsSilentWrong) {
  Case c;
  EXPECT_EQ(compare("O", c.grid, c.off(1.5e-3), c.g, c.l, 1e-6).verdict, Verdict::kOk);
  Comparison wrong = compare("O", c.grid, c.off(0.5), c.g, c.l, 1e-6);
  EXPECT_EQ(wrong.verdict, Verdict::kSilentWrong);
  EXPECT_NEAR(wrong.max_abs_err, 0.5, 1e-12);
  EXPECT_NEAR(wrong.yardstick_max_err, 1e-3, 1e-12);
}

TEST(Verdict, PyTorchsLooserBoundsMakeSuspectOnlyForTheRightTensor) {
  Case c;
  // 10x the yardstick: beyond rule 5 for every tensor; within dQ's 180x, not O's 4x.
  std::vector<double> b = c.off(1e-2);
  EXPECT_EQ(compare("dQ", c.grid, b, c.g, c.l, 1e-6).verdict, Verdict::kSuspect);
  EXPECT_EQ(compare("O", c.grid, b, c.g, c.l, 1e-6).verdict, Verdict::kSilentWrong);
}

// A gradient that nearly cancels (the H200's clean hd256 dQ): G is 1e-12 while the rounding of any
// bf16 computation, the yardstick's too, is 1e-9. Cosine against G is noise there, so a kernel as
// far from G as two yardsticks is suspect, not wrong; four yardsticks away it is silent-wrong.
TEST(Verdict, CosineDoesNotJudgeAGradientBelowTheDtypesResolution) {
  Grid grid{1, 2, 128, 4};
  std::vector<double> g, l, b;
  for (int64_t i = 0; i < grid.size(); ++i) {
    const double x = static_cast<double>(i);
    g.push_back(1e-12 * std::sin(0.1 * x));
    l.push_back(g.back() + 7e-10 * std::sin(0.37 * x));
    b.push_back(g.back() + 1.4e-9 * std::cos(0.53 * x));  // 2x the yardstick, unrelated to G
  }
  Comparison near = compare("dQ", grid, b, g, l, 1e-14);
  EXPECT_LT(near.cosine, 0.5);
  EXPECT_GT(near.yardstick_rel_l2, kUnresolvedRelL2);
  EXPECT_EQ(near.verdict, Verdict::kSuspect);
  for (double& x : b) x *= 2;
  EXPECT_EQ(compare("dQ", grid, b, g, l, 1e-14).verdict, Verdict::kSilentWrong) << "4x the yardstick";
  // Where the yardstick resolves G, the cosine rule stands: an error within dQ's 180x bound (100x
  // here) but 10% of a G that the yardstick follows to 0.1% is wrong.
  for (int64_t i = 0; i < grid.size(); ++i) {
    const double x = static_cast<double>(i);
    g[i] = 1e-9 * std::sin(0.1 * x);
    l[i] = g[i] + 1e-12 * std::sin(0.37 * x);
    b[i] = g[i] + 1e-10 * std::cos(0.53 * x);
  }
  Comparison resolved = compare("dQ", grid, b, g, l, 1e-16);
  EXPECT_LT(resolved.cosine, 0.999);
  EXPECT_LT(resolved.yardstick_rel_l2, kUnresolvedRelL2);
  EXPECT_EQ(resolved.verdict, Verdict::kSilentWrong);
}

TEST(Verdict, NonFiniteIsCountedAndLocatedOnlyWhereTheReferenceIsFinite) {
  Case c;
  std::vector<double> b = c.g;
  b[1 * 128 * 4 + 70 * 4 + 2] = kNaN;  // head 1, row 70: row tile 1
  b[1 * 128 * 4 + 71 * 4 + 0] = std::numeric_limits<double>::infinity();
  std::vector<double> g = c.g;
  g[0] = -std::numeric_limits<double>::infinity();  // e.g. LSE of a hidden row: not judged there
  b[0] = kNaN;
  Comparison r = compare("dQ", c.grid, b, g, c.l, 1e-6);
  EXPECT_EQ(r.verdict, Verdict::kNonFinite);
  EXPECT_EQ(r.nonfinite, 2);
  EXPECT_EQ(r.nonfinite_where, "batch 0, head 1, rows 70-71 (row tile 1)");
}

TEST(Verdict, AZeroRowTileIsAllZeroLikeSeed002) {
  Case c;
  std::vector<double> b = c.off(1e-4);
  for (int64_t i = 64 * 4; i < 128 * 4; ++i) b[i] = 0.0;  // head 0, rows 64-127 never written
  Comparison r = compare("O", c.grid, b, c.g, c.l, 1e-6);
  EXPECT_EQ(r.verdict, Verdict::kAllZero);
  EXPECT_EQ(r.all_zero_where, "batch 0, head 0, rows 64-127");
  // A reference that is itself about zero there is no finding.
  std::vector<double> g = c.g;
  for (int64_t i = 64 * 4; i < 128 * 4; ++i) g[i] = 1e-9;
  EXPECT_NE(compare("O", c.grid, b, g, c.l, 1e-6).verdict, Verdict::kAllZero);
}

BackendRun run(const std::string& name, std::vector<std::pair<std::string, Verdict>> verdicts, bool original = false) {
  BackendRun b{.name = name, .ran = true, .original = original};
  for (const auto& [role, v] : verdicts) b.tensors.push_back(Comparison{.role = role, .verdict = v});
  return b;
}

TEST(RootCause, OneBackendWrongWhileAnotherIsRightIsBackendSpecific) {
  ReplayResult r;
  r.backend = "cudnn";
  r.main_kernel = "cudnn_generated_fort_native_sdpa_sm90_flash_bprop";
  r.backends = {run("cudnn", {{"O", Verdict::kOk}, {"dQ", Verdict::kNonFinite}, {"dK", Verdict::kOk}}, true),
                run("efficient", {{"O", Verdict::kOk}, {"dQ", Verdict::kOk}, {"dK", Verdict::kOk}}),
                BackendRun{.name = "flash", .detail = "Flash attention does not support a mask"}};
  RootCause c = findRootCause(r);
  EXPECT_EQ(c.cls, CauseClass::kBackendSpecific);
  EXPECT_EQ(c.backend, "cudnn");
  EXPECT_EQ(c.kernel, r.main_kernel);
  EXPECT_EQ(c.tensors, std::vector<std::string>{"dQ"});
  EXPECT_NE(c.explanation.find("dQ only"), std::string::npos) << c.explanation;
  EXPECT_EQ(exitCodeOf(c), 1);
}

TEST(RootCause, EveryBackendAlikeIsPrecisionLimitOnlyWhenTheYardstickFailsToo) {
  ReplayResult r;
  r.dtype = "float32";
  r.backends = {run("flash_cpu", {{"O", Verdict::kNonFinite}}), run("math", {{"O", Verdict::kNonFinite}})};
  r.yardstick_nonfinite = {"O"};
  EXPECT_EQ(findRootCause(r).cls, CauseClass::kPrecisionLimit);
  r.yardstick_nonfinite.clear();
  EXPECT_EQ(findRootCause(r).cls, CauseClass::kReferenceSuspect);
  r.backends = {run("flash_cpu", {{"O", Verdict::kOk}, {"dV", Verdict::kSilentWrong}}),
                run("math", {{"O", Verdict::kOk}, {"dV", Verdict::kSilentWrong}})};
  EXPECT_EQ(findRootCause(r).cls, CauseClass::kForwardOkBackwardWrong);
}

Reruns rerunsOn(const std::string& device, int runs, int reproduced, int distinct) {
  Reruns reruns;
  reruns.backend = "cudnn";
  reruns.devices.push_back(
      {.device = device, .runs = runs, .reproduced = reproduced, .identical_to_run = 0, .distinct = distinct});
  return reruns;
}

TEST(RootCause, RerunsThatGiveTheRunsResultSometimesAreANondeterministicKernel) {
  ReplayResult r;
  r.backend = "cudnn";
  r.main_kernel = "cudnn_generated_fort_native_sdpa_sm90_flash_bprop";
  r.captured = run("captured", {{"dQ", Verdict::kNonFinite}});
  r.backends = {run("cudnn", {{"dQ", Verdict::kOk}}, true), run("efficient", {{"dQ", Verdict::kOk}})};
  r.reruns = rerunsOn("cuda:0 (NVIDIA H100 80GB HBM3 (sm_90))", 5, 2, 3);
  r.reruns->others.push_back({.name = "efficient", .runs = 5, .failed = 0, .distinct = 1});
  RootCause c = findRootCause(r);
  EXPECT_EQ(c.cls, CauseClass::kNondeterministic);
  EXPECT_STREQ(causeName(c.cls), "nondeterministic");
  EXPECT_EQ(c.backend, "cudnn");
  EXPECT_EQ(c.kernel, r.main_kernel);
  EXPECT_EQ(c.tensors, std::vector<std::string>{"dQ"});
  EXPECT_NE(c.explanation.find("2 of 5 reruns"), std::string::npos) << c.explanation;
  EXPECT_NE(c.explanation.find("efficient is stable on the same call"), std::string::npos) << c.explanation;
  EXPECT_EQ(exitCodeOf(c), 1) << "a fault that recurs sometimes recurred";
  // Every rerun gives it: the verdicts decide, as without reruns.
  r.reruns = rerunsOn("cpu", 5, 5, 1);
  r.backends[0] = run("cudnn", {{"dQ", Verdict::kNonFinite}}, true);
  EXPECT_EQ(findRootCause(r).cls, CauseClass::kBackendSpecific);
}

TEST(RootCause, NeverReproducedWhileEveryRerunIsIdenticalSuspectsTheDevice) {
  ReplayResult r;
  r.backend = "cudnn";
  r.captured_on = "cuda:0";
  r.environment["gpu"] = "NVIDIA H100 80GB HBM3 (sm_90)";
  r.captured = run("captured", {{"O", Verdict::kSilentWrong}});
  r.backends = {run("cudnn", {{"O", Verdict::kOk}}, true)};
  r.reruns = rerunsOn("cuda:0 (NVIDIA H100 80GB HBM3 (sm_90))", 5, 0, 1);
  RootCause c = findRootCause(r);
  EXPECT_EQ(c.cls, CauseClass::kNotReproduced);
  EXPECT_NE(c.explanation.find("suspect the device it ran on (NVIDIA H100 80GB HBM3 (sm_90))"), std::string::npos)
      << c.explanation;
  EXPECT_NE(c.explanation.find("each bitwise identical"), std::string::npos) << c.explanation;
  // Replayed on another model: identical reruns there cannot blame the run's device.
  r.reruns = rerunsOn("cuda:0 (NVIDIA H200 (sm_90))", 5, 0, 1);
  c = findRootCause(r);
  EXPECT_EQ(c.explanation.find("suspect the device"), std::string::npos) << c.explanation;
  EXPECT_NE(c.explanation.find("replay it where it ran"), std::string::npos) << c.explanation;
  r.reruns = rerunsOn("cuda:0 (NVIDIA H100 80GB HBM3 (sm_90))", 5, 0, 1);
  // Reruns that differ in their bits without failing: nondeterministic, but never this failure.
  r.reruns = rerunsOn("cuda:0", 5, 0, 4);
  c = findRootCause(r);
  EXPECT_EQ(c.cls, CauseClass::kNotReproduced);
  EXPECT_NE(c.explanation.find("4 distinct results"), std::string::npos) << c.explanation;
  EXPECT_EQ(c.explanation.find("suspect the device"), std::string::npos) << c.explanation;
}

TEST(RootCause, ARerunReproducesTheRunOnlyWithTheSameVerdicts) {
  BackendRun captured = run("captured", {{"O", Verdict::kOk}, {"dQ", Verdict::kNonFinite}});
  EXPECT_TRUE(reproduces(run("cudnn", {{"O", Verdict::kSuspect}, {"dQ", Verdict::kNonFinite}}), captured));
  EXPECT_FALSE(reproduces(run("cudnn", {{"O", Verdict::kOk}, {"dQ", Verdict::kOk}}), captured));
  EXPECT_FALSE(reproduces(run("cudnn", {{"O", Verdict::kOk}, {"dQ", Verdict::kSilentWrong}}), captured))
      << "another failure";
  EXPECT_FALSE(reproduces(run("cudnn", {{"O", Verdict::kOk}}), captured)) << "dQ missing";
  EXPECT_FALSE(reproduces(BackendRun{.name = "cudnn"}, captured)) << "did not run";
  Reruns two;
  two.devices = {{.device = "cuda:0", .runs = 5, .reproduced = 5, .identical_to_run = 5, .distinct = 1},
                 {.device = "cuda:1", .runs = 5, .reproduced = 0, .identical_to_run = 0, .distinct = 1}};
  EXPECT_TRUE(two.dependsOnDevice());
  EXPECT_EQ(two.runs(), 10);
  EXPECT_EQ(two.reproduced(), 5);
  two.devices[1].reproduced = 5;
  EXPECT_FALSE(two.dependsOnDevice());
}

TEST(RootCause, ACapturedFailureNoBackendRepeatsIsNotReproducedAndAnInvalidReferenceIsTheInput) {
  ReplayResult r;
  r.backends = {run("flash_cpu", {{"dQ", Verdict::kOk}})};
  EXPECT_EQ(findRootCause(r).cls, CauseClass::kNone);
  r.captured = run("captured", {{"dQ", Verdict::kNonFinite}});
  r.injected = "dQ";
  RootCause c = findRootCause(r);
  EXPECT_EQ(c.cls, CauseClass::kNotReproduced);
  EXPECT_NE(c.explanation.find("--inject"), std::string::npos);
  EXPECT_EQ(exitCodeOf(c), 0);
  // Replay could not rerun the captured backend (fa4) while every backend it ran is right: the
  // suspect is fa4, never "nondeterministic"; a capture lacking part of the call cannot be judged.
  r.injected.clear();
  r.backend = "fa4";
  EXPECT_EQ(findRootCause(r).cls, CauseClass::kCapturedBackendSuspect);
  EXPECT_EQ(findRootCause(r).backend, "fa4");
  EXPECT_EQ(exitCodeOf(findRootCause(r)), 1);
  r.incomplete = "its score_mod and block mask were not materialised";
  EXPECT_EQ(findRootCause(r).cls, CauseClass::kCannotJudge);
  EXPECT_EQ(exitCodeOf(findRootCause(r)), 0);
  r.incomplete.clear();
  r.backends.push_back(run("fa4", {{"dQ", Verdict::kNonFinite}}, true));
  EXPECT_EQ(findRootCause(r).cls, CauseClass::kBackendSpecific)
      << "rerun where it imports, the captured backend is judged itself";
  r.reference_problem = "Q has 3 non-finite values";
  EXPECT_EQ(findRootCause(r).cls, CauseClass::kInputCaused);
}

}  // namespace
}  // namespace nanprov::replay
