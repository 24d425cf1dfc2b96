// End-to-end: attention computed with a plain softmax in ops, in real CPU runs under `nanprov run`:
// nn.MultiheadAttention's default need_weights=True path and Hugging Face's eager attention (backend
// plain_softmax, which replay reruns), and FlashAttention 2/3 through stand-ins of their signatures.
// Ground truth comes from plain-PyTorch forward hooks in the training script (mha_padding.py --oracle)
// or from where the script puts its overflow.
#include <gtest/gtest.h>

#include "tests/e2e/e2e_support.h"

namespace {
using namespace e2e;

// pytorch#41508: a banded mask plus padding leaves query rows with no key; MHA's plain softmax makes
// them NaN, the loss stays finite and every in_proj gradient goes NaN. Found at that forward, in the
// module the oracle names, and replay says the fully masked rows did it.
TEST(PlainSoftmaxAttention, MultiheadAttentionFullyMaskedRowsFoundWhereTheOracleSays) {
  TrainedRun r = train("mha-masked", "", "--oracle", "mha_padding.py");
  ASSERT_EQ(r.report.code, 1) << r.train.out;
  const json& e = r.doc["first_edge"];
  ASSERT_NO_FATAL_FAILURE(expectEdgeWhereTheOracleSays(
      r.train.out, e, {{"op", "multi_head_attention_forward"}, {"backend", "plain_softmax"}}));
  EXPECT_EQ(r.doc["outcome"], "edge");
  const json& s = r.doc["gradient_sentinel"];
  ASSERT_TRUE(s.is_object()) << r.report.out;
  std::vector<std::string> params = strings(s["gradients"]);
  EXPECT_NE(std::find(params.begin(), params.end(), "layers.0.attn.in_proj_weight"), params.end()) << s.dump();
  for (const std::string& p : params) EXPECT_EQ(p.rfind("param", 0), std::string::npos) << p;

  Result replay = sh(nanprov() + " replay " + r.dir.string() + " --json");
  json d = json::parse(replay.out, nullptr, false);
  ASSERT_FALSE(d.is_discarded()) << replay.out;
  EXPECT_EQ(replay.code, 1);
  EXPECT_EQ(d["root_cause"]["class"], "fully-masked-rows") << replay.out;
  EXPECT_GT(d["conditions"]["fully_masked_rows"].get<int64_t>(), 0);
  for (const json& b : d["backends"]) {
    if (b["name"] == "plain_softmax") EXPECT_EQ(b["tensors"]["O"]["verdict"], "non-finite") << b.dump();
    else if (b["status"] == "ran") EXPECT_EQ(b["tensors"]["O"]["verdict"], "ok") << b.dump();
  }
  // The public report of this very bug (open since 2020) is named, with its workaround.
  ASSERT_TRUE(d["known_issues"].is_array()) << replay.out;
  std::vector<std::string> known;
  for (const json& k : d["known_issues"]) known.push_back(k["id"]);
  EXPECT_NE(std::find(known.begin(), known.end(), "pytorch#41508"), known.end()) << d["known_issues"].dump(1);
  Result text = sh(nanprov() + " replay " + r.dir.string());
  EXPECT_NE(text.out.find("known issue: matches pytorch#41508"), std::string::npos) << text.out;
  // The report knows as much from the store alone (the mask's fully masked rows); whether dropout
  // was on, which pytorch#152028 needs, only the capture says.
  std::vector<std::string> reported;
  for (const json& k : r.doc["known_issues"]) reported.push_back(k["id"]);
  EXPECT_NE(std::find(reported.begin(), reported.end(), "pytorch#41508"), reported.end())
      << r.doc["known_issues"].dump(1);
  Result report = sh(nanprov() + " report " + r.dir.string());
  EXPECT_NE(report.out.find("known issue: matches pytorch#41508"), std::string::npos) << report.out;
  // One unit for the fully masked rows, named, in the report and in replay alike: the mask's rows
  // stand for every batch and head they broadcast to.
  const std::string rows = std::to_string(d["conditions"]["fully_masked_rows"].get<int64_t>()) +
                           " query rows (over batch and heads) have every key masked";
  EXPECT_NE(report.out.find("mask: " + rows), std::string::npos) << rows << " in\n" << report.out;
  EXPECT_NE(text.out.find(rows), std::string::npos) << rows << " in\n" << text.out;
  for (const json& t : e["tensors"]) {
    if (t["role"] == "mask") EXPECT_EQ(t["masked_query_rows"], d["conditions"]["fully_masked_rows"]) << t.dump();
  }
  for (const json& k : r.doc["possible_known_issues"]) {
    EXPECT_FALSE(k["undecided"].empty()) << k.dump();
    EXPECT_EQ(std::find(reported.begin(), reported.end(), k["id"].get<std::string>()), reported.end())
        << "matched and possible: " << k.dump();
    // The MHA's dropout is 0.0 and the store says so: the dropout bug is ruled out, not undecided.
    EXPECT_NE(k["id"], "pytorch#152028") << k.dump();
  }
  EXPECT_EQ(std::find(reported.begin(), reported.end(), "pytorch#152028"), reported.end())
      << r.doc["known_issues"].dump(1);
}

// The same MHA with dropout 0.1 (applied in training): the store records it, so the report names
// pytorch#152028 (masks and dropout) beside pytorch#41508; the capture records it too, and replay,
// which cannot recompute a random dropout mask, says it cannot judge the call rather than guess.
TEST(PlainSoftmaxAttention, MultiheadAttentionDropoutIsRecordedForTheKnownIssues) {
  TrainedRun r = train("mha-dropout", "", "--dropout 0.1", "mha_padding.py");
  ASSERT_EQ(r.report.code, 1) << r.train.out;
  std::vector<std::string> reported;
  for (const json& k : r.doc["known_issues"]) reported.push_back(k["id"]);
  EXPECT_NE(std::find(reported.begin(), reported.end(), "pytorch#152028"), reported.end())
      << r.doc["known_issues"].dump(1);
  EXPECT_NE(std::find(reported.begin(), reported.end(), "pytorch#41508"), reported.end())
      << r.doc["known_issues"].dump(1);
  Result fwd =
      sh(nanprov() + " sql " + r.dir.string() + " \"SELECT DISTINCT dropout_p FROM calls WHERE phase = 'fwd'\" --json");
  json rows = json::parse(fwd.out, nullptr, false);
  ASSERT_TRUE(rows.is_array() && rows.size() == 1) << fwd.out;
  EXPECT_DOUBLE_EQ(rows[0]["dropout_p"].get<double>(), 0.1) << fwd.out;
  Result replay = sh(nanprov() + " replay " + r.dir.string() + " --json");
  json d = json::parse(replay.out, nullptr, false);
  ASSERT_FALSE(d.is_discarded()) << replay.out;
  EXPECT_EQ(d["root_cause"]["class"], "cannot-judge") << replay.out;
  EXPECT_DOUBLE_EQ(d["conditions"]["dropout_p"].get<double>(), 0.1) << replay.out;
}

// The backward, from tensor hooks on the projections and the out-projection's input: checked,
// linked to its forward, and the training untouched with and without padding.
TEST(PlainSoftmaxAttention, MultiheadAttentionBackwardIsCheckedAndLossesAreBitIdentical) {
  TrainedRun r = train("mha-bwd", "--inject 'layer=1,phase=bwd,tensor=dK,step=1'", "--pad-step 99", "mha_padding.py");
  ASSERT_EQ(r.report.code, 1) << r.train.out;
  const json& e = r.doc["first_edge"];
  expectFields(e, {{"phase", "bwd"}, {"step", 1}, {"layer", 1}, {"module", "layers.1.attn"}});
  EXPECT_EQ(strings(e["nonfinite_outputs"]), std::vector<std::string>{"dK"});
  EXPECT_EQ(r.doc["coverage"]["attention_calls"], 16) << "2 layers x 4 steps, forward and backward";
  EXPECT_TRUE(r.doc["coverage"]["unprobed"].empty()) << r.report.out;
  for (std::string pad : {"--pad-step 99", "--pad-step 2"}) {
    std::string args = example("mha_padding.py") + " --print-losses " + pad;
    Result plain = sh(python() + " " + args + " 2>/dev/null");
    Result probed = sh(nanprov() + " run --out " + runDir("mha-identical").string() + " -- " + python() + " " + args +
                       " 2>/dev/null");
    EXPECT_NE(plain.out.find("step 1: loss 0x"), std::string::npos) << plain.out;
    EXPECT_EQ(plain.out, probed.out);
  }
}

// The same overflow inside layer 1 of a Hugging Face Llama gives the same edge in eager and sdpa;
// eager runs as one probed call each, its clean run is clean with every call counted.
TEST(PlainSoftmaxAttention, HuggingFaceEagerAndSdpaGiveTheSameEdge) {
  json edges[2];
  int i = 0;
  for (std::string attn : {"eager", "sdpa"}) {
    SCOPED_TRACE(attn);
    TrainedRun r = train("hf-" + attn, "", "--attn " + attn + " --overflow-layer 1 --overflow-step 1", "hf_llama.py");
    ASSERT_EQ(r.report.code, 1) << r.train.out;
    edges[i++] = r.doc["first_edge"];
    EXPECT_EQ(r.doc["first_edge"]["origin"], "attention");
  }
  for (const char* key : {"step", "layer", "call", "phase", "module"}) EXPECT_EQ(edges[0][key], edges[1][key]) << key;
  expectFields(edges[0], {{"step", 1},
                          {"layer", 1},
                          {"module", "model.layers.1.self_attn"},
                          {"backend", "plain_softmax"},
                          {"op", "eager_attention_forward"}});

  TrainedRun clean = train("hf-eager-clean", "", "--attn eager", "hf_llama.py");
  EXPECT_EQ(clean.report.code, 0) << clean.report.out;
  EXPECT_EQ(clean.doc["outcome"], "clean");
  EXPECT_EQ(clean.doc["coverage"]["attention_calls"], 12) << "2 layers x 3 steps, forward and backward";
  EXPECT_TRUE(clean.doc["coverage"]["unprobed"].empty()) << clean.report.out;
}

// Hugging Face's FlashAttention path (flash_attention_3, through a stand-in of its package: HF's own
// availability checks want a GPU and are skipped) is probed under the FlashAttention function HF
// calls, once per call, with HF's module path: the same edge as sdpa.
TEST(PlainSoftmaxAttention, HuggingFaceFlashAttentionIsProbedOnceWithItsModule) {
  ScopedEnv standin("PYTHONPATH", std::string(NANPROV_TEST_SCRIPTS) + "/flash_attn_standin");
  TrainedRun r = train("hf-fa3", "", "--attn flash_attention_3 --attn-after-build --overflow-layer 1 --overflow-step 1",
                       "hf_llama.py");
  ASSERT_EQ(r.report.code, 1) << r.train.out;
  const json& e = r.doc["first_edge"];
  expectFields(e, {{"step", 1},
                   {"layer", 1},
                   {"phase", "fwd"},
                   {"module", "model.layers.1.self_attn"},
                   {"backend", "fa3"},
                   {"origin", "attention"}});
  TrainedRun clean = train("hf-fa3-clean", "", "--attn flash_attention_3 --attn-after-build", "hf_llama.py");
  EXPECT_EQ(clean.report.code, 0) << clean.report.out;
  EXPECT_EQ(clean.doc["coverage"]["attention_calls"], 12) << "2 layers x 3 steps, forward and backward, each once";
  EXPECT_TRUE(clean.doc["coverage"]["unprobed"].empty()) << clean.report.out;
}

// FlashAttention 2 and 3, wrapped like FA4: found at their step and layer in both layouts. A faulty
// kernel (the stand-in writes NaN into a row) is the suspect when replay cannot rerun it, never
// "nondeterministic".
TEST(PlainSoftmaxAttention, FlashAttention2And3AreProbedAndAFaultyOneIsTheSuspect) {
  ScopedEnv standin("PYTHONPATH", std::string(NANPROV_TEST_SCRIPTS) + "/flash_attn_standin");
  for (std::string flavour : {"fa2", "fa3"}) {
    for (std::string layout : {"", " --varlen"}) {
      SCOPED_TRACE(flavour + layout);
      TrainedRun r =
          train(flavour, "", "--flavour " + flavour + " --dtype float32 --overflow-layer 1 --overflow-step 2" + layout,
                "flash_attn_training.py");
      ASSERT_EQ(r.report.code, 1) << r.train.out;
      const json& e = r.doc["first_edge"];
      expectFields(e, {{"step", 2},
                       {"layer", 1},
                       {"backend", flavour},
                       {"op", layout.empty() ? "flash_attn_func" : "flash_attn_varlen_func"}});
      EXPECT_EQ(r.doc["coverage"]["attention_calls"], 24) << "3 layers x 4 steps, forward and backward";
    }
  }
  ScopedEnv fault("STANDIN_FAULT", "nan-row");
  TrainedRun r = train("fa2-fault", "", "--flavour fa2 --dtype float32 --steps 2", "flash_attn_training.py");
  ASSERT_EQ(r.report.code, 1) << r.train.out;
  EXPECT_EQ(r.doc["first_edge"]["origin"], "attention");
  // Where the package imports, replay reruns the call through it, and the fault recurs there only.
  Result replay = sh(nanprov() + " replay " + r.dir.string() + " --json");
  json d = json::parse(replay.out, nullptr, false);
  ASSERT_FALSE(d.is_discarded()) << replay.out;
  EXPECT_EQ(replay.code, 1) << replay.out;
  EXPECT_EQ(d["root_cause"]["class"], "backend-specific") << replay.out;
  EXPECT_EQ(d["root_cause"]["backend"], "fa2") << replay.out;
  EXPECT_EQ(strings(d["root_cause"]["tensors"]), std::vector<std::string>{"O"}) << replay.out;
  // Where it does not import, every backend replay can run gets the call right: fa2 is the
  // suspect, and the explanation says why it was not rerun.
  ScopedEnv no_package("PYTHONPATH", "");
  Result unrun = sh(nanprov() + " replay " + r.dir.string() + " --json");
  json u = json::parse(unrun.out, nullptr, false);
  ASSERT_FALSE(u.is_discarded()) << unrun.out;
  EXPECT_EQ(u["root_cause"]["class"], "captured-backend-suspect") << unrun.out;
  EXPECT_EQ(u["root_cause"]["backend"], "fa2") << unrun.out;
  EXPECT_NE(u["root_cause"]["explanation"].get<std::string>().find("not importable"), std::string::npos) << unrun.out;
}

// A capture is often replayed inside the bug-report folder it came in. Whatever Python modules lie
// there (a flash_attn/ whose flash_attn_func returns q, a typing_extensions.py that torch imports)
// are never imported by the rerun child, and never decide the verdict.
TEST(PlainSoftmaxAttention, TheFlashAttentionRerunImportsNothingFromTheFolderReplayRunsIn) {
  ScopedEnv standin("PYTHONPATH", std::string(NANPROV_TEST_SCRIPTS) + "/flash_attn_standin");
  ScopedEnv fault("STANDIN_FAULT", "nan-row");
  TrainedRun r = train("fa2-planted", "", "--flavour fa2 --dtype float32 --steps 2", "flash_attn_training.py");
  ASSERT_EQ(r.report.code, 1) << r.train.out;
  fs::path folder = r.dir / "bug-report";
  fs::create_directories(folder / "flash_attn");
  const std::string mark = "import pathlib; pathlib.Path(__file__).with_name('MARK-' + __name__).write_text('ran')\n";
  std::ofstream(folder / "flash_attn" / "__init__.py") << mark << "def flash_attn_func(q, k, v, **kw):\n    return q\n";
  std::ofstream(folder / "typing_extensions.py") << mark;
  ScopedEnv no_package("PYTHONPATH", "");
  Result replay = sh("cd " + folder.string() + " && " + nanprov() + " replay " + r.dir.string() + " --json");
  json d = json::parse(replay.out, nullptr, false);
  ASSERT_FALSE(d.is_discarded()) << replay.out;
  EXPECT_FALSE(fs::exists(folder / "flash_attn" / "MARK-flash_attn")) << "the planted flash_attn was imported";
  EXPECT_FALSE(fs::exists(folder / "MARK-typing_extensions")) << "the planted typing_extensions was imported";
  // As where the package is absent: fa2 is the suspect, not rerun because it does not import.
  EXPECT_EQ(d["root_cause"]["class"], "captured-backend-suspect") << replay.out;
  EXPECT_NE(d["root_cause"]["explanation"].get<std::string>().find("not importable"), std::string::npos) << replay.out;
}

}  // namespace
