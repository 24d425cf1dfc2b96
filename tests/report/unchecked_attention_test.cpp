#include "report/unchecked_attention.h"

#include <gtest/gtest.h>

#include "base/attention_like.h"
#include "report/outcome.h"
#include "store/reader.h"

namespace nanprov::report {
namespace {

// A run whose rank 0 counted `whats` unchecked, first at step 0.
// `classes`: the trail's class of each module pattern.
store::RunData runWith(const std::vector<std::string>& whats, const std::map<std::string, std::string>& classes = {}) {
  store::RunData run;
  store::RankInfo& r = run.ranks.emplace_back();
  for (const std::string& what : whats) {
    r.counters.unprobed[what] = 3;
    r.counters.unprobed_first_step[what] = 0;
  }
  r.counters.module_class = classes;
  return run;
}

std::string bySoftmaxCount(const std::string& pattern) {
  return "attention-like softmax(q·kᵀ) in " + pattern + ": not checked; --probe-module '" + pattern + "' checks it";
}

const std::vector<std::string> kDiffusersPlaces = {
    "down_blocks.*.attentions.*.transformer_blocks.*.attn1", "down_blocks.*.attentions.*.transformer_blocks.*.attn2",
    "mid_block.attentions.*.transformer_blocks.*.attn1",     "mid_block.attentions.*.transformer_blocks.*.attn2",
    "up_blocks.*.attentions.*.transformer_blocks.*.attn1",   "up_blocks.*.attentions.*.transformer_blocks.*.attn2"};

TEST(UncheckedAttention, KindsAreReadApartFromTheirSuggestion) {
  store::RunData run = runWith({bySoftmaxCount("layers.*.attn"), "aten::_transformer_encoder_layer_fwd"});
  std::vector<UncheckedAttention> u = uncheckedAttention(run);
  ASSERT_EQ(u.size(), 2u);
  EXPECT_EQ(u[0].kind, "aten::_transformer_encoder_layer_fwd");
  EXPECT_EQ(u[0].probe_module, "");
  EXPECT_EQ(u[1].kind, "attention-like softmax(q·kᵀ) in layers.*.attn: not checked");
  EXPECT_EQ(u[1].probe_module, "layers.*.attn");
  EXPECT_EQ(u[1].count, 3);
}

// diffusers' six attention places are one class: with the trail's class of each place, one
// suggestion names the class; without it, each place, once.
TEST(UncheckedAttention, OneClassCoveringEveryPlaceIsSuggestedByName) {
  std::vector<std::string> whats;
  std::map<std::string, std::string> classes;
  for (const std::string& place : kDiffusersPlaces) {
    whats.push_back(bySoftmaxCount(place));
    classes[place] = "Attention";
  }
  EXPECT_EQ(suggestedProbeModules(runWith(whats, classes)), std::vector<std::string>{"Attention"});
  EXPECT_EQ(suggestionText({"Attention"}), "nanprov run --probe-module Attention checks it");
  EXPECT_EQ(suggestedProbeModules(runWith(whats)).size(), 6u) << "no class known without --trail";
  classes[kDiffusersPlaces[0]] = "JointAttention";
  EXPECT_EQ(suggestedProbeModules(runWith(whats, classes)).size(), 6u) << "two classes: each place";
}

// An option the run was given is never suggested again, by its pattern or by the class it names.
TEST(UncheckedAttention, NeverSuggestsAnOptionTheRunWasGiven) {
  store::RunData run = runWith({bySoftmaxCount("blocks.*.attn")}, {{"blocks.*.attn", "Attention"}});
  run.settings.probe_modules = {"blocks.*.attn"};
  EXPECT_TRUE(suggestedProbeModules(run).empty());
  run.settings.probe_modules = {"Attention:q=0,k=1,v=2"};
  EXPECT_TRUE(suggestedProbeModules(run).empty());
  run.settings.probe_modules = {"Other"};
  EXPECT_EQ(suggestedProbeModules(run), std::vector<std::string>{"Attention"});
}

TEST(UncheckedAttention, AModuleIsOfItByPatternOrByClass) {
  store::RunData run = runWith({bySoftmaxCount("blocks.*.attn"),
                                "attention-like module LinearAttention at enc.*.mix ran no "
                                "attention op nanprov checks: not checked; --probe-module "
                                "'LinearAttention' checks it"});
  ModuleCheckRecord m;
  m.module = "blocks.3.attn", m.module_class = "Whatever";
  EXPECT_TRUE(isUncheckedAttention(run, m));
  m.module = "blocks.3.mlp";
  EXPECT_FALSE(isUncheckedAttention(run, m));
  m.module_class = "LinearAttention";
  EXPECT_TRUE(isUncheckedAttention(run, m));
}

TEST(AttentionLike, ClassOrLastPathPart) {
  EXPECT_TRUE(looksLikeAttention("model.layers.3.self_attn", "Weird"));
  EXPECT_TRUE(looksLikeAttention("down.0.attn1", "Weird"));
  EXPECT_TRUE(looksLikeAttention("x", "CausalSelfAttention"));
  EXPECT_TRUE(looksLikeAttention("x", "MHAttn"));
  EXPECT_FALSE(looksLikeAttention("layers.0.post_attention_layernorm", "LayerNorm"));
  EXPECT_FALSE(looksLikeAttention("h.0.attn.c_proj", "Linear"));
  EXPECT_FALSE(looksLikeAttention("", "Net"));
  EXPECT_EQ(modulePattern("stages.1.blocks.10.attn"), "stages.*.blocks.*.attn");
  EXPECT_TRUE(matchesModulePattern("stages.*.blocks.*.attn", "stages.1.blocks.10.attn"));
  EXPECT_FALSE(matchesModulePattern("stages.*.blocks.*.attn", "stages.1.blocks.10.attn.q"));
}

// Values that went non-finite beside unchecked attention are unattributed; with none, partial.
TEST(UncheckedAttention, OutcomesCannotBeMisread) {
  store::RunData run = runWith({bySoftmaxCount("blocks.*.attn")});
  run.total_calls = 4;
  EXPECT_EQ(conclude(run, Findings{}, std::nullopt).outcome, Outcome::kPartial);
  run.sentinel.push_back(SentinelRecord{.step = 2, .tensor = SentinelTensor::kGrad, .parameter = "head.weight"});
  Conclusion c = conclude(run, Findings{}, std::nullopt);
  EXPECT_EQ(c.outcome, Outcome::kUnattributed);
  EXPECT_STREQ(outcomeName(c.outcome), "unattributed");
  EXPECT_TRUE(outcomeIsFault(c.outcome));
  EXPECT_FALSE(outcomeIsFault(Outcome::kPartial));
  // --trail named that attention's module as where they were made: joined, still unattributed.
  ModuleCheckRecord m;
  m.step = 2, m.module = "blocks.0.attn", m.module_class = "Attention", m.posinf = 1;
  c = conclude(run, Findings{}, FirstModule{.check = m});
  EXPECT_TRUE(c.made_in_unchecked_attention);
  EXPECT_EQ(c.outcome, Outcome::kUnattributed);
  // It named a module outside attention, from finite inputs: that is the origin.
  m.module = "blocks.0.mlp", m.module_class = "Linear";
  c = conclude(run, Findings{}, FirstModule{.check = m});
  EXPECT_FALSE(c.made_in_unchecked_attention);
  EXPECT_EQ(c.outcome, Outcome::kOutsideAttention);
  // A module handed no tensor made nothing "from finite inputs": not an answer.
  m.inputs = ModuleInputs::kNone;
  EXPECT_EQ(conclude(run, Findings{}, FirstModule{.check = m}).outcome, Outcome::kUnattributed);
}

}  // namespace
}  // namespace nanprov::report
