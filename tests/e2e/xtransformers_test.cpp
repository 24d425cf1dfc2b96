// End-to-end: x-transformers, installed from the package index as a user has it (scripts/setup
// pins it), trained on the CPU under nanprov's default probes. Its Attend computes attention in
// einsum ('b h i d, b h j d -> b h i j'), a causal masked_fill, a float32 softmax and einsum back
// (tests/e2e/scripts/xtransformers_training.py): recognised by what it computes, checked, and
// found where plain-PyTorch forward hooks in the script say the first non-finite value was made.
#include <gtest/gtest.h>

#include <regex>

#include "tests/e2e/e2e_support.h"

namespace {
using namespace e2e;

const std::string kScript = std::string(NANPROV_TEST_SCRIPTS) + "/xtransformers_training.py";

const json* roleOf(const json& call, const std::string& role) {
  for (const json& t : call["tensors"]) {
    if (t["role"] == role) return &t;
  }
  return nullptr;
}

// An overflow in the second attention layer at step 2: the edge is that call, forward, made there
// from finite Q, K and V, and its capture replays the NaN.
TEST(XTransformers, OverflowInTheSecondAttentionLayerIsItsEdge) {
  TrainedRun r = train("xtransformers-attn", "", "--glitch-step 2 --oracle", kScript);
  ASSERT_EQ(r.report.code, 1) << r.train.out << r.report.out;
  std::smatch oracle;
  ASSERT_TRUE(
      std::regex_search(r.train.out, oracle, std::regex("first non-finite forward output: (\\S+) at step (\\d+)")))
      << r.train.out;
  EXPECT_EQ(oracle[1].str(), "attn_layers.layers.2.1.attend");
  EXPECT_EQ(r.doc["outcome"], "edge") << r.report.out;
  const json& e = r.doc["first_edge"];
  expectFields(e, {{"module", oracle[1].str()},
                   {"step", std::stoi(oracle[2].str())},
                   {"phase", "fwd"},
                   {"origin", "attention"},
                   {"inputs_finite", true},
                   {"op", "softmax_attention"}});
  if (const json* q = roleOf(e, "Q")) EXPECT_EQ((*q)["shape"], "[4,4,16,64]") << "dim_head 64, its default";
  EXPECT_NE(roleOf(e, "S"), nullptr) << e.dump();
  EXPECT_EQ(r.doc["coverage"]["unprobed"].size(), 0u) << r.doc["coverage"].dump();
  Result text = sh(nanprov() + " report " + r.dir.string());
  EXPECT_EQ(text.out.find("outside attention"), std::string::npos) << text.out;

  Result replay = sh(nanprov() + " replay " + r.dir.string() + " --json");
  json d = json::parse(replay.out, nullptr, false);
  ASSERT_FALSE(d.is_discarded()) << replay.out;
  EXPECT_EQ(replay.code, 1) << replay.out;
  EXPECT_EQ(d["root_cause"]["class"], "precision-limit") << replay.out;
}

// The clean run is clean: every attention call checked and finite at each of its 4 optimizer steps.
TEST(XTransformers, CleanRunIsClean) {
  TrainedRun r = train("xtransformers-clean", "", "", kScript);
  EXPECT_EQ(r.train.code, 0) << r.train.out;
  ASSERT_EQ(r.report.code, 0) << r.report.out;
  EXPECT_EQ(r.doc["outcome"], "clean") << r.report.out;
  EXPECT_EQ(r.doc["coverage"]["attention_calls"], 16) << "2 attention layers x 4 steps, forward and backward";
  EXPECT_EQ(r.doc["summary"]["steps"], 4) << r.report.out;
}

// A fault in the last feedforward: every attention call was checked, so the origin is outside
// attention; the probes only read, so the losses are bit-identical.
TEST(XTransformers, MlpFaultIsOutsideAttentionAndLossesAreBitIdentical) {
  TrainedRun r = train("xtransformers-mlp", "", "--glitch-step 2 --fault mlp --oracle", kScript);
  ASSERT_EQ(r.report.code, 1) << r.report.out;
  // Where the overflow first shows differs by CPU: the feedforward or the final norm after it.
  EXPECT_TRUE(r.train.out.find("first non-finite forward output: attn_layers.layers.3.1.ff") != std::string::npos ||
              r.train.out.find("first non-finite forward output: attn_layers.final_norm") != std::string::npos)
      << r.train.out;
  EXPECT_EQ(r.doc["coverage"]["unprobed"].size(), 0u) << r.doc["coverage"].dump();
  Result text = sh(nanprov() + " report " + r.dir.string());
  EXPECT_NE(text.out.find("outside attention"), std::string::npos) << text.out;

  std::string run = kScript + " --glitch-step 2 --print-losses";
  Result plain = sh(python() + " " + run + " 2>/dev/null");
  Result probed = sh(nanprov() + " run --out " + runDir("xtransformers-identical").string() + " -- " + python() + " " +
                     run + " 2>/dev/null");
  ASSERT_EQ(plain.code, 0);
  EXPECT_NE(plain.out.find("step 3: loss "), std::string::npos) << plain.out;
  EXPECT_EQ(plain.out, probed.out);
}

}  // namespace
