// End-to-end: attention written in plain ops as third-party code writes it (timm's unfused path,
// diffusers' AttnProcessor, a GPT-style causal block; tests/e2e/scripts/handwritten_kinds.py) is
// checked by default, in training and under no_grad: found where plain-PyTorch forward hooks in the
// script say the first non-finite value was made (--oracle), with its real Q, K, V, its capture
// replayed with the right root cause, and the training's losses bit-identical.
#include <gtest/gtest.h>

#include "tests/e2e/e2e_support.h"

namespace {
using namespace e2e;

const std::string kScript = std::string(NANPROV_TEST_SCRIPTS) + "/handwritten_kinds.py";

struct Case {
  std::string name, args;  // handwritten_kinds.py's arguments, --glitch-step 2 --oracle added
  std::string module;      // where the oracle must find the first non-finite output
  std::string q_shape;     // Q as the call's first matmul read it, in [batch, heads, seq, dim]
  std::string cause;       // replay's root cause
};

const std::vector<Case> kCases = {
    {"vit", "--model vit", "blocks.0.attn", "[4,4,17,8]", "precision-limit"},
    {"unet", "--model unet", "mid_block.0.attn1", "[8,1,64,8]", "precision-limit"},
    {"unet-half", "--model unet --dtype float16", "mid_block.0.attn1", "[8,1,64,8]", "precision-limit"},
    {"causal", "--model causal", "h.0.attn", "[4,4,12,8]", "fully-masked-rows"},
    {"vit-no-grad", "--model vit --no-grad", "blocks.0.attn", "[4,4,17,8]", "precision-limit"},
    {"unet-half-no-grad", "--model unet --dtype float16 --no-grad", "mid_block.0.attn1", "[8,1,64,8]",
     "precision-limit"},
};

const json* roleOf(const json& call, const std::string& role) {
  for (const json& t : call["tensors"]) {
    if (t["role"] == role) return &t;
  }
  return nullptr;
}

// Each case trained on `device` ("cpu" or "cuda"): the edge where the oracle says, its roles, and
// its replay's root cause.
void expectEveryCaseFoundAndReplayed(const std::string& device) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name + " on " + device);
    TrainedRun r =
        train("hw-" + device + "-" + c.name, "", c.args + " --device " + device + " --glitch-step 2 --oracle", kScript);
    ASSERT_EQ(r.report.code, 1) << r.train.out << r.report.out;
    const json& e = r.doc["first_edge"];
    ASSERT_NO_FATAL_FAILURE(expectEdgeWhereTheOracleSays(
        r.train.out, e, {{"inputs_finite", true}, {"op", "softmax_attention"}, {"backend", "plain_softmax"}}));
    EXPECT_EQ(e["module"], c.module) << "the oracle and the report agree, on the module the case names";
    EXPECT_EQ(r.doc["outcome"], "edge") << r.report.out;
    for (const char* role : {"Q", "K", "V", "S", "P", "O"})
      EXPECT_NE(roleOf(e, role), nullptr) << role << " in " << e.dump();
    if (const json* q = roleOf(e, "Q"))
      EXPECT_EQ((*q)["shape"], c.q_shape) << "the first matmul's operand, not the module's input";
    if (c.cause == "fully-masked-rows") {
      ASSERT_NE(roleOf(e, "S"), nullptr);
      EXPECT_EQ((*roleOf(e, "S"))["masked_rows"], 12) << "sequence 1's first 3 query rows, over 4 heads";
    }

    Result replay = sh(nanprov() + " replay " + r.dir.string() + " --json");
    json d = json::parse(replay.out, nullptr, false);
    ASSERT_FALSE(d.is_discarded()) << replay.out;
    EXPECT_EQ(replay.code, 1) << replay.out;
    EXPECT_EQ(d["root_cause"]["class"], c.cause) << replay.out;
    bool plain_ran = false;
    for (const json& b : d["backends"]) {
      if (b["name"] != "plain_softmax") continue;
      plain_ran = b["status"] == "ran";
      EXPECT_EQ(b["tensors"]["O"]["verdict"], "non-finite") << b.dump() << " reruns the run's NaN";
    }
    EXPECT_TRUE(plain_ran) << replay.out;
    if (device == "cuda") EXPECT_EQ(r.doc["ranks"][0]["meta"]["host_syncs"], "0") << "S and P checked on the device";
  }
}

TEST(HandwrittenAttention, FoundWhereTheOracleSaysAndReplayedWithItsCause) { expectEveryCaseFoundAndReplayed("cpu"); }

// The same on CUDA: the roles S and P go through the device checks, their counts come back at a
// later poll, and the captures replay on the GPU.
TEST(Gpu, HandwrittenAttentionIsFoundWhereTheOracleSaysOnTheDevice) {
  REQUIRE_CUDA();
  expectEveryCaseFoundAndReplayed("cuda");
}

// Backward too: the capture of a backward call (dQ, dK, dV from tensor hooks) replays, its bias
// read from P; every call nanprov captured is one replay takes.
TEST(HandwrittenAttention, BackwardCapturesReplay) {
  for (std::string model : {"vit", "unet", "causal"}) {
    SCOPED_TRACE(model);
    TrainedRun r = train("hw-bwd-" + model, "--capture 'phase=bwd,step=1,layer=1'", "--model " + model, kScript);
    EXPECT_EQ(r.report.code, 0) << r.report.out;
    json bwd = commandJson("calls", r.dir, "--phase bwd --step 1 --layer 1");
    ASSERT_EQ(bwd.size(), 1u) << bwd.dump();
    for (const char* role : {"dO", "dQ", "dK", "dV", "P"}) EXPECT_NE(roleOf(bwd[0], role), nullptr) << role;
    Result list = sh("ls " + (r.dir / "captures").string());
    ASSERT_NE(list.out.find("bwd"), std::string::npos) << list.out;
    std::string file = list.out.substr(0, list.out.find('\n'));
    Result replay = sh(nanprov() + " replay " + (r.dir / "captures" / file).string() + " --json");
    json d = json::parse(replay.out, nullptr, false);
    ASSERT_FALSE(d.is_discarded()) << replay.out;
    EXPECT_EQ(replay.code, 0) << replay.out;
    EXPECT_EQ(d["root_cause"]["class"], "none") << replay.out;
  }
}

// --probe-module on a module that computes softmax attention inside (timm's Attention.forward(x))
// records the call inside, with the real Q, K, V, never the module's hidden-state input.
TEST(HandwrittenAttention, ProbeModuleYieldsToTheCallInside) {
  TrainedRun r = train("hw-probe-module", "--probe-module 'blocks.*.attn'", "--model vit --glitch-step 2", kScript);
  ASSERT_EQ(r.report.code, 1) << r.report.out;
  expectFields(r.doc["first_edge"], {{"op", "softmax_attention"}, {"module", "blocks.0.attn"}, {"step", 2}});
  ASSERT_NE(roleOf(r.doc["first_edge"], "Q"), nullptr);
  EXPECT_EQ((*roleOf(r.doc["first_edge"], "Q"))["shape"], "[4,4,17,8]");
  EXPECT_EQ(r.doc["coverage"]["attention_calls"], 16) << "2 blocks x 4 steps, forward and backward, once each";
  EXPECT_EQ(commandJson("calls", r.dir, "--backend module").size(), 0u);
  Result replay = sh(nanprov() + " replay " + r.dir.string() + " --json");
  EXPECT_EQ(replay.code, 1) << replay.out;
  EXPECT_NE(replay.out.find("precision-limit"), std::string::npos) << replay.out;
}

// The probes only read: every model's losses (or outputs, under no_grad) are bit-identical.
TEST(HandwrittenAttention, LossesAreBitIdentical) {
  for (std::string args :
       {"--model vit", "--model unet", "--model unet --dtype float16", "--model causal", "--model vit --no-grad"}) {
    SCOPED_TRACE(args);
    std::string run = kScript + " " + args + " --glitch-step 2 --print-losses";
    Result plain = sh(python() + " " + run + " 2>/dev/null");
    Result probed = sh(nanprov() + " run --out " + runDir("hw-identical").string() + " -- " + python() + " " + run +
                       " 2>/dev/null");
    ASSERT_EQ(plain.code, 0);
    EXPECT_NE(plain.out.find("step 3: loss "), std::string::npos) << plain.out;
    EXPECT_EQ(plain.out, probed.out);
  }
}

}  // namespace
