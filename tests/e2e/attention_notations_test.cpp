// End-to-end: attention written by hand in every notation (tests/e2e/scripts/attention_notations.py:
// einsum in several layouts, einops, matmul, @, bmm, baddbmm; F.softmax, Tensor.softmax,
// nn.Softmax, upcast or not; masked_fill, additive masks, clone, dropout) is recognised by what
// it computes and checked by default: found where plain-PyTorch forward hooks in the script say the
// first non-finite value was made (--oracle), at its step and layer, with Q in [batch, heads, seq,
// dim] as the first matmul read it, and its capture replayed. Attention nanprov cannot check makes
// a fault elsewhere `unattributed`, naming the module and the option that checks it; with every
// attention checked, a fault in an MLP is outside attention. The losses are bit-identical.
#include <gtest/gtest.h>

#include <regex>

#include "tests/e2e/e2e_support.h"

namespace {
using namespace e2e;

const std::string kScript = std::string(NANPROV_TEST_SCRIPTS) + "/attention_notations.py";

struct Notation {
  std::string name;
  std::string q_shape;  // Q as the call's first matmul read it, in [batch, heads, seq, dim]
};

// Multi-query attention's heads are rows of one K/V head: the matmul reads Q as [4, 1, 4·12, 8].
const std::vector<Notation> kNotations = {
    {"einsum-bhsd", "[4,4,12,8]"}, {"einsum-bshd", "[4,4,12,8]"}, {"einsum-folded", "[16,1,12,8]"},
    {"einsum-mqa", "[4,1,48,8]"},  {"einops", "[4,4,12,8]"},      {"matmul", "[4,4,12,8]"},
    {"at", "[4,4,12,8]"},          {"bmm", "[16,1,12,8]"},        {"baddbmm", "[16,1,12,8]"},
    {"masked", "[4,4,12,8]"},      {"additive", "[4,4,12,8]"},
};

const json* roleOf(const json& call, const std::string& role) {
  for (const json& t : call["tensors"]) {
    if (t["role"] == role) return &t;
  }
  return nullptr;
}

std::string oracleModule(const std::string& out) {
  std::smatch m;
  return std::regex_search(out, m, std::regex("first non-finite forward output: (\\S+) at step 2")) ? m[1].str() : "";
}

TEST(AttentionNotations, EachIsFoundWhereTheOracleSaysAndReplays) {
  for (const Notation& n : kNotations) {
    SCOPED_TRACE(n.name);
    TrainedRun r = train("notation-" + n.name, "", "--notation " + n.name + " --glitch-step 2 --oracle", kScript);
    ASSERT_EQ(r.report.code, 1) << r.train.out << r.report.out;
    ASSERT_EQ(oracleModule(r.train.out), "layers.1.attn") << r.train.out;
    EXPECT_EQ(r.doc["outcome"], "edge") << r.report.out;
    const json& e = r.doc["first_edge"];
    expectFields(e, {{"module", "layers.1.attn"},
                     {"step", 2},
                     {"phase", "fwd"},
                     {"layer", 1},
                     {"origin", "attention"},
                     {"inputs_finite", true},
                     {"op", "softmax_attention"},
                     {"backend", "plain_softmax"}});
    for (const char* role : {"Q", "K", "V", "S", "P", "O"})
      EXPECT_NE(roleOf(e, role), nullptr) << role << " in " << e.dump();
    if (const json* q = roleOf(e, "Q")) EXPECT_EQ((*q)["shape"], n.q_shape);
    EXPECT_EQ(r.doc["coverage"]["unprobed"].size(), 0u) << r.doc["coverage"].dump();
    // Both layers, forward and backward, at the three clean steps and the faulty step's forward at least.
    EXPECT_GE(r.doc["coverage"]["attention_calls"].get<int64_t>(), 14) << r.doc["coverage"].dump();

    Result replay = sh(nanprov() + " replay " + r.dir.string() + " --json");
    json d = json::parse(replay.out, nullptr, false);
    ASSERT_FALSE(d.is_discarded()) << replay.out;
    EXPECT_EQ(replay.code, 1) << replay.out;
    EXPECT_EQ(d["root_cause"]["class"], "precision-limit") << replay.out;
    bool plain_ran = false;
    for (const json& b : d["backends"]) {
      if (b["name"] != "plain_softmax") continue;
      plain_ran = b["status"] == "ran";
      EXPECT_EQ(b["tensors"]["O"]["verdict"], "non-finite") << b.dump() << " reruns the run's NaN";
    }
    EXPECT_TRUE(plain_ran) << replay.out;
  }
}

// Clean runs: every notation's calls are checked and finite, forward and backward, at every step.
TEST(AttentionNotations, CleanRunsAreCleanAndBackwardCapturesReplay) {
  for (const std::string name : {"einsum-bshd", "einsum-mqa", "baddbmm", "additive"}) {
    SCOPED_TRACE(name);
    TrainedRun r =
        train("notation-clean-" + name, "--capture 'phase=bwd,step=1,layer=1'", "--notation " + name, kScript);
    ASSERT_EQ(r.report.code, 0) << r.report.out;
    EXPECT_EQ(r.doc["outcome"], "clean") << r.report.out;
    EXPECT_EQ(r.doc["coverage"]["attention_calls"], 16) << "2 layers x 4 steps, forward and backward";
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

// A fault in an MLP after the last attention: with every attention call checked, the report says
// the origin is outside attention; beside attention nanprov could not check (P·V without a
// matmul), it says it cannot tell, names that module and the --probe-module that checks it, in
// the default run (no --trail), and never says "outside attention".
TEST(AttentionNotations, OutsideAttentionOnlyWhenEveryAttentionWasChecked) {
  TrainedRun checked =
      train("notation-mlp-checked", "", "--notation einsum-bhsd --fault mlp --glitch-step 2 --oracle", kScript);
  ASSERT_EQ(checked.report.code, 1) << checked.report.out;
  // Where the weight's overflow first shows differs by CPU (GELU's vector code): in the MLP or the
  // norm after it, always outside attention.
  const std::string made = oracleModule(checked.train.out);
  EXPECT_TRUE(made.rfind("layers.1.mlp.", 0) == 0 || made == "norm") << checked.train.out;
  EXPECT_EQ(checked.doc["coverage"]["unprobed"].size(), 0u) << checked.doc["coverage"].dump();
  EXPECT_EQ(checked.doc["first_edge"]["origin"], "upstream") << "the backward received the MLP's NaN";
  EXPECT_EQ(checked.doc["outcome"], "edge");
  Result text = sh(nanprov() + " report " + checked.dir.string());
  EXPECT_NE(text.out.find("the origin is outside attention"), std::string::npos) << text.out;

  TrainedRun unchecked =
      train("notation-mlp-unchecked", "", "--notation unrecognised --fault mlp --glitch-step 2", kScript);
  ASSERT_EQ(unchecked.report.code, 1) << unchecked.report.out;
  EXPECT_EQ(unchecked.doc["outcome"], "unattributed") << unchecked.report.out;
  ASSERT_EQ(unchecked.doc["coverage"]["unprobed"].size(), 1u) << unchecked.doc["coverage"].dump();
  EXPECT_EQ(unchecked.doc["coverage"]["unprobed"][0]["probe_module"], "layers.*.attn")
      << unchecked.doc["coverage"].dump();
  text = sh(nanprov() + " report " + unchecked.dir.string());
  EXPECT_EQ(text.out.find("outside attention"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("cannot tell"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("layers.*.attn"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("--probe-module"), std::string::npos) << text.out;
}

// The probes only read: the losses, dropout's draws included, are bit-identical.
TEST(AttentionNotations, LossesAreBitIdentical) {
  for (const std::string name : {"einsum-bshd", "einsum-mqa", "at", "unrecognised"}) {
    SCOPED_TRACE(name);
    std::string run = kScript + " --notation " + name + " --glitch-step 2 --print-losses";
    Result plain = sh(python() + " " + run + " 2>/dev/null");
    Result probed = sh(nanprov() + " run --out " + runDir("notation-identical").string() + " -- " + python() + " " +
                       run + " 2>/dev/null");
    ASSERT_EQ(plain.code, 0);
    EXPECT_NE(plain.out.find("step 3: loss "), std::string::npos) << plain.out;
    EXPECT_EQ(plain.out, probed.out);
  }
}

}  // namespace
