#include "report/first_module.h"

#include <gtest/gtest.h>

#include "report/run_overview.h"
#include "store/reader.h"

namespace nanprov::report {
namespace {

ModuleCheckRecord check(int64_t step, int64_t order, const std::string& module, bool inputs_finite,
                        Phase phase = Phase::kForward, ModuleInputs inputs = ModuleInputs::kFinite) {
  ModuleCheckRecord m;
  m.step = step;
  m.order = order;
  m.time_ns = order;
  m.module = module;
  m.module_class = "Linear";
  m.inputs = inputs_finite ? inputs : ModuleInputs::kNonFinite;
  m.posinf = 1;
  m.phase = phase;
  return m;
}

// An attention call of `module` whose input (upstream) or output (attention) was non-finite.
Findings withEdge(store::RunData& run, const std::string& module, Origin origin, int64_t step = 1,
                  Phase phase = Phase::kForward) {
  CallRecord c;
  c.step = step;
  c.phase = phase;
  c.module = module;
  run.calls.push_back(c);
  Findings f;
  f.first = 0;
  f.origin = origin;
  return f;
}

// Inner modules end first: the first one with finite inputs is the innermost around the op that
// made the value; a later step's rows (propagation) never win over an earlier step's.
TEST(FirstModule, TheFirstCallWithFiniteInputsOfTheEarliestStep) {
  store::RunData run;
  run.module_checks = {check(2, 0, "h.0.ln_1", true), check(1, 5, "h.0.attn.o_proj", false),
                       check(1, 6, "h.0.attn", true), check(1, 7, "h.0", true)};
  Findings none;
  std::optional<FirstModule> m = firstModule(run, none);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->check.module, "h.0.attn");
  EXPECT_EQ(m->check.step, 1);
}

// Without a module that had finite inputs (the value came with the batch), the first call is named.
TEST(FirstModule, WithoutFiniteInputsTheFirstCallIsNamed) {
  store::RunData run;
  run.module_checks = {check(3, 9, "h.1", false), check(3, 4, "wte", false)};
  std::optional<FirstModule> m = firstModule(run, Findings{});
  ASSERT_TRUE(m);
  EXPECT_EQ(m->check.module, "wte");
  EXPECT_FALSE(m->check.inputsFinite());
}

// A NaN that came with the data reaches a loss module (open_clip's ClipLoss), whose backward then
// sends NaN gradients from the finite 1.0 it receives. That backward row has finite inputs, but the
// forward of the same step already had non-finite outputs: the stem that first received the data is
// named, and the backward, which comes after it, never is (it was judged "later" than the edge, and
// nothing was named).
TEST(FirstModule, AStepsForwardComesBeforeItsBackwardWhateverItsInputs) {
  store::RunData run;
  run.module_checks = {check(2, 1, "visual.conv1", false), check(2, 2, "visual.ln_pre", false),
                       check(2, 9, "", true, Phase::kBackward)};
  Findings f = withEdge(run, "visual.transformer.resblocks.0.attn", Origin::kUpstream, 2);
  std::optional<FirstModule> m = firstModule(run, f);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->check.module, "visual.conv1");
  EXPECT_EQ(m->check.phase, Phase::kForward);
  EXPECT_FALSE(m->check.inputsFinite());
  // A backward is still named when no forward of its step had a non-finite output.
  run.module_checks = {check(2, 9, "h.0.mlp.act", true, Phase::kBackward), check(3, 1, "wte", false)};
  m = firstModule(run, Findings{});
  ASSERT_TRUE(m);
  EXPECT_EQ(m->check.module, "h.0.mlp.act");
}

// A module handed no tensor, or objects the trail does not look into (a batch it could not
// walk), never made a value "from finite inputs": the outermost module of a run whose batch held
// the NaN is not named over the first module that received it.
TEST(FirstModule, AModuleNotSeenToReceiveFiniteTensorsIsNeverTheSource) {
  for (ModuleInputs unseen : {ModuleInputs::kNone, ModuleInputs::kPartlySeen}) {
    store::RunData run;
    run.module_checks = {check(2, 9, "", true, Phase::kForward, unseen), check(2, 3, "embed", false)};
    std::optional<FirstModule> m = firstModule(run, Findings{});
    ASSERT_TRUE(m);
    EXPECT_EQ(m->check.module, "embed");
    const std::string text = firstModuleText(*m, StepUnit::kOptimizerStep, false);
    EXPECT_NE(text.find("they came from outside any module"), std::string::npos) << text;
    // Alone, it is named, and never said to have had finite inputs.
    run.module_checks.pop_back();
    const std::string alone = firstModuleText(*firstModule(run, Findings{}), StepUnit::kOptimizerStep, false);
    EXPECT_EQ(alone.find("from finite inputs"), std::string::npos) << alone;
  }
}

// Attention made it: its own module, or one around it, is not a first module outside attention.
TEST(FirstModule, NoneWhenAttentionMadeTheValue) {
  store::RunData run;
  run.module_checks = {check(1, 6, "layers.0.attn", true), check(1, 7, "layers.0", true)};
  Findings f = withEdge(run, "layers.0.attn", Origin::kAttention);
  EXPECT_FALSE(firstModule(run, f));
  run.module_checks = {check(1, 3, "layers.0.attn_norm", true)};  // a sibling before attention: named
  EXPECT_TRUE(firstModule(run, f));
  EXPECT_FALSE(firstModule(store::RunData{}, f));
}

// A module that ran after the first edge only shows where the value spread: what made it went
// unchecked (a compiled backward), so no module is named.
TEST(FirstModule, NoneFromAfterTheFirstEdge) {
  store::RunData run;
  Findings f = withEdge(run, "h.0.attn", Origin::kUpstream, /*step=*/2, Phase::kBackward);
  run.module_checks = {check(3, 0, "h.0.ln_1", false)};
  EXPECT_FALSE(firstModule(run, f));
  run.module_checks = {check(2, 0, "h.0.ln_1", true)};  // the same step's forward came before it
  EXPECT_TRUE(firstModule(run, f));
  store::RunData fwd;
  Findings g = withEdge(fwd, "h.0.attn", Origin::kUpstream, /*step=*/2, Phase::kForward);
  fwd.module_checks = {check(2, 0, "h.0.mlp", true, Phase::kBackward)};
  EXPECT_FALSE(firstModule(fwd, g));
  // The same step and phase on the edge's rank: a module whose check was taken after the edge
  // began ran after it; one from before it is named.
  store::RunData same;
  Findings h = withEdge(same, "h.1.attn", Origin::kUpstream, /*step=*/2, Phase::kBackward);
  same.calls[0].start_ns = 1000;
  same.module_checks = {check(2, 1500, "h.0.mlp", true, Phase::kBackward)};
  EXPECT_FALSE(firstModule(same, h));
  same.module_checks = {check(2, 900, "h.1.mlp", true, Phase::kBackward)};
  EXPECT_TRUE(firstModule(same, h));
  same.module_checks = {check(2, 1500, "h.0.mlp", true, Phase::kBackward)};
  same.module_checks[0].rank = 1;  // another rank's clock is not compared
  EXPECT_TRUE(firstModule(same, h));
  // A module around the attention call is checked after it ran, so after the edge began: it is
  // still named when the value came from upstream (code inside it that is not a module).
  store::RunData around;
  Findings k = withEdge(around, "h.1.attn", Origin::kUpstream, /*step=*/2, Phase::kForward);
  around.calls[0].start_ns = 1000;
  around.module_checks = {check(2, 1500, "h.1.attn", true)};
  std::optional<FirstModule> m = firstModule(around, k);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->check.module, "h.1.attn");
}

// q_proj, k_proj and v_proj take the same x, so each was handed the sum of their gradients: the
// first is named, and the text says that its siblings may have made it as well (not the modules
// around them, which take x too).
TEST(FirstModule, SiblingsJudgedOnTheSameGradientAreNamedWithIt) {
  store::RunData run;
  for (const char* module : {"l.0.attn.q_proj", "l.0.attn.k_proj", "l.0.attn.v_proj", "l.0.attn", "l.0"}) {
    ModuleCheckRecord m = check(1, static_cast<int64_t>(run.module_checks.size()), module, true, Phase::kBackward);
    m.gradient = 42;
    run.module_checks.push_back(m);
  }
  ModuleCheckRecord other = check(1, 9, "l.0.mlp", true, Phase::kBackward);
  other.gradient = 7;
  run.module_checks.push_back(other);
  std::optional<FirstModule> m = firstModule(run, Findings{});
  ASSERT_TRUE(m);
  EXPECT_EQ(m->check.module, "l.0.attn.q_proj");
  EXPECT_EQ(m->shares_gradient_with, (std::vector<std::string>{"l.0.attn.k_proj", "l.0.attn.v_proj"}));
  EXPECT_NE(firstModuleText(*m, StepUnit::kOptimizerStep, false)
                .find("that input also feeds l.0.attn.k_proj, l.0.attn.v_proj"),
            std::string::npos);
  EXPECT_EQ(firstModuleJson(m)["shares_gradient_with"].size(), 2u);
}

TEST(FirstModule, TextSaysWhatTheModuleDidInEachPhase) {
  const StepUnit steps = StepUnit::kOptimizerStep;
  FirstModule fwd{.check = check(2, 0, "h.0.ln_1", true)};
  fwd.check.module_class = "LayerNorm";
  fwd.check.largest_input = 3.4e38;
  EXPECT_EQ(firstModuleText(fwd, steps, false),
            "the output of h.0.ln_1 (LayerNorm), from finite inputs (largest |x| 3.4e+38)");
  FirstModule compiled = fwd;  // checked inside a compiled graph, after values it could not read
  compiled.check.unchecked_before = {"h.0.mlp.c_fc", "h.0", "wte", "h.0.attn.c_proj", "h.0.attn"};
  EXPECT_EQ(
      firstModuleText(compiled, steps, false),
      "the output of h.0.ln_1 (LayerNorm), from finite inputs (largest |x| 3.4e+38); in compiled code, h.0.mlp.c_fc, "
      "h.0, wte, h.0.attn.c_proj, and 1 more ran unchecked between those inputs and it, and may have made it");
  EXPECT_EQ(firstModuleJson(compiled)["unchecked_before"].size(), 5u);
  compiled.check.unchecked_before = {"h.0.mlp.c_fc", "..."};  // the walk upstream stopped at its limit
  EXPECT_NE(
      firstModuleText(compiled, steps, false)
          .find("in compiled code, h.0.mlp.c_fc, code further upstream ran unchecked between those inputs and it"),
      std::string::npos);
  FirstModule bwd{.check = check(2, 0, "", true, Phase::kBackward)};
  EXPECT_EQ(firstModuleText(bwd, steps, true)
                .rfind("the gradient that the backward of the outermost module (Linear) sent to its "
                       "input at step 2 bwd, from finite incoming gradients",
                       0),
            0u);
  EXPECT_NE(firstModuleText(bwd, StepUnit::kForwardPass, true).find("at forward pass 2 bwd"), std::string::npos)
      << "an inference run counts forward passes";
  CallRecord edge;
  edge.step = 2;
  edge.module = "h.0.attn";
  EXPECT_EQ(upstreamOriginText(RunOverview{}, std::nullopt, edge),
            "the origin is outside attention (nanprov run --trail names the module that made it)");
  EXPECT_NE(upstreamOriginText(RunOverview{.trail_on = true, .trail_missed_compiled_code = true}, std::nullopt, edge)
                .find("the modules' backward inside some torch.compile'd code was not checked"),
            std::string::npos);
}

}  // namespace
}  // namespace nanprov::report
