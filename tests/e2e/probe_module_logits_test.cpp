// End-to-end: `nanprov run --probe-module` on attention nanprov does not recognise by itself
// (tests/e2e/scripts/conv_stem_vit.py --attn hand: softmax over the keys of k qᵀ, dim -2). Its
// first block's logits grow 1e13-fold a step from step 2 until they overflow at step 4, while the
// module's input stays small. The trend must read the logits the module computed (the scores its
// softmax consumed, which the script's own code prints as the oracle), not a bound from the
// module's arguments, so the warning comes before the NaN; and its capture must replay when the
// module is handed Q, K and V, or the report must say up front that it cannot be rebuilt.
#include <gtest/gtest.h>

#include <map>
#include <regex>

#include "tests/e2e/e2e_support.h"

namespace {
using namespace e2e;

std::string script() { return std::string(NANPROV_TEST_SCRIPTS) + "/conv_stem_vit.py"; }

TrainedRun probed(const std::string& name, const std::string& args) {
  return train(name, "--probe-module HandAttention", "--oracle --attn hand --fault logits --args " + args, script());
}

// The script's own largest |score| per step, before the NaN.
std::map<int, double> oracleLogits(const std::string& out) {
  std::map<int, double> logits;
  static const std::regex line("oracle: step (\\d+) logits (\\S+)");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), line); it != std::sregex_iterator(); ++it) {
    if ((*it)[2].str() != "inf") logits[std::stoi((*it)[1].str())] = std::stod((*it)[2].str());
  }
  return logits;
}

// The module is handed its hidden states ([B, S, E]) and projects them itself: a bound from its
// arguments says nothing of its logits (the "peak 54" where they were 1e27). The scores
// its softmax consumed are the trend, step by step, and the growth is warned before the NaN.
TEST(ProbeModuleLogits, TheTrendReadsTheScoresTheModulesSoftmaxConsumed) {
  TrainedRun r = probed("probe-module-logits", "x");
  ASSERT_EQ(r.report.code, 1) << r.train.out << r.report.out;
  expectFields(r.doc["first_edge"],
               {{"step", 4}, {"phase", "fwd"}, {"module", "blocks.0.attn"}, {"origin", "attention"}});
  const std::map<int, double> oracle = oracleLogits(r.train.out);
  ASSERT_EQ(oracle.size(), 4u) << r.train.out;
  ASSERT_GT(oracle.at(3), 1e25);

  const json& trends = r.doc["trends"];
  const json* layer0 = nullptr;
  for (const json& layer : trends["layers"]) {
    if (layer["module"] == "blocks.0.attn") layer0 = &layer;
  }
  ASSERT_NE(layer0, nullptr) << trends.dump();
  int compared = 0;
  for (const json& p : (*layer0)["points"]) {
    auto want = oracle.find(p["step"].get<int>());
    if (want == oracle.end()) continue;
    EXPECT_DOUBLE_EQ(p["logit"].get<double>(), want->second) << "step " << p["step"];
    EXPECT_EQ(p["logit_source"], "scores") << p.dump();
    ++compared;
  }
  EXPECT_EQ(compared, 4) << layer0->dump();

  ASSERT_FALSE(trends["warnings"].empty()) << trends.dump();
  const json& w = trends["warnings"][0];
  expectFields(w, {{"kind", "growth"}, {"module", "blocks.0.attn"}, {"step", 2}, {"logit_source", "scores"}});
  EXPECT_DOUBLE_EQ(w["value"].get<double>(), oracle.at(2));
  const size_t said = r.train.out.find("nanprov: warning: rank 0, step 2: blocks.0.attn attention logits grew");
  ASSERT_NE(said, std::string::npos) << r.train.out;
  EXPECT_LT(said, r.train.out.find("oracle: step 4 logits inf")) << "said while the training ran, before the NaN";
}

// Handed Q, K and V ([B, H, S, D], projected by the block): the capture of the call that made the
// NaN replays.
TEST(ProbeModuleLogits, ACaptureOfAModuleHandedQKVReplays) {
  TrainedRun r = probed("probe-module-qkv", "qkv");
  ASSERT_EQ(r.report.code, 1) << r.train.out << r.report.out;
  const json& edge = r.doc["first_edge"];
  expectFields(edge, {{"step", 4}, {"module", "blocks.0.attn"}, {"capture_skipped", nullptr}});
  ASSERT_TRUE(edge["capture"].is_string()) << edge.dump();
  Result replay = sh(nanprov() + " replay " + edge["capture"].get<std::string>() + " --json 2>&1");
  EXPECT_EQ(replay.out.find("not a replayable attention capture"), std::string::npos) << replay.out;
  const json doc = json::parse(replay.out, nullptr, false);
  ASSERT_TRUE(doc.is_object()) << replay.out;
  EXPECT_FALSE(doc["backends"].empty()) << replay.out;
}

// Handed its hidden states, its Q, K and V cannot be rebuilt from the capture: the report says so
// where it would name the capture, and the run said so while it ran; no capture replay would refuse.
TEST(ProbeModuleLogits, AModuleWhoseQKVCannotBeRebuiltIsSaidUpFront) {
  TrainedRun r = probed("probe-module-hidden", "x");
  ASSERT_EQ(r.report.code, 1) << r.train.out << r.report.out;
  const json& edge = r.doc["first_edge"];
  EXPECT_EQ(edge["capture"], nullptr) << edge.dump();
  const std::string why =
      "replay could not rebuild it: the module's arguments are not its Q, K and V (Q is [2,17,32], not [batch, heads, "
      "seq, dim]); name them: --probe-module 'HandAttention:q=ARG,k=ARG,v=ARG'";
  EXPECT_EQ(edge["capture_skipped"], why) << edge.dump();
  Result text = sh(nanprov() + " report " + r.dir.string());
  EXPECT_NE(text.out.find("not captured: " + why), std::string::npos) << text.out;
  EXPECT_NE(
      r.train.out.find("nanprov: --probe-module: module:HandAttention is checked at its boundary, but replay could "
                       "not rebuild its calls"),
      std::string::npos)
      << r.train.out;
}

}  // namespace
