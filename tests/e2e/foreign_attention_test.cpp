// End-to-end: attention whose kernels run as no ATen op, in real CPU runs under `nanprov run`.
// FlashAttention-4 is bracketed by the bootstrap's wrappers of its autograd functions; FA4 runs
// only on Hopper and Blackwell, so here a stand-in package of its call signature and saved-tensor
// layout (scripts/flash_attn_standin) is imported instead, and the GPU tests run the real one. Compiled
// FlexAttention is bracketed inside the graph by the bootstrap's Inductor pass.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "tests/e2e/e2e_support.h"

namespace {
using namespace e2e;

std::string standIn() { return std::string(NANPROV_TEST_SCRIPTS) + "/flash_attn_standin"; }

// A layer whose scores overflow float32 inside FA4 is found at its step and layer, in both of
// FA4's layouts, and replay blames the values, not a kernel.
TEST(ForeignAttention, Fa4OverflowIsFoundAtItsStepAndLayerAndReplays) {
  ScopedEnv fa4("PYTHONPATH", standIn());
  for (std::string layout : {"", "--varlen"}) {
    SCOPED_TRACE(layout);
    TrainedRun r =
        train("fa4", "", "--dtype float32 --overflow-layer 1 --overflow-step 2 " + layout, "flash_attn_training.py");
    ASSERT_EQ(r.report.code, 1) << r.train.out;
    const json& e = r.doc["first_edge"];
    expectFields(e, {{"step", 2},
                     {"layer", 1},
                     {"phase", "fwd"},
                     {"module", "layers.1"},
                     {"op", layout.empty() ? "flash_attn_func" : "flash_attn_varlen_func"},
                     {"backend", "fa4"}});
    EXPECT_EQ(strings(e["nonfinite_outputs"]), std::vector<std::string>{"O"});
    EXPECT_EQ(r.doc["coverage"]["attention_calls"], 24) << "3 layers x 4 steps, forward and backward";
    Result replay = sh(nanprov() + " replay " + r.dir.string() + " --json");
    json d = json::parse(replay.out, nullptr, false);
    ASSERT_FALSE(d.is_discarded()) << replay.out;
    EXPECT_EQ(d["root_cause"]["class"], "precision-limit") << replay.out;
  }
}

// Clean, every FA4 call is checked, forward and backward, and the training is untouched. A packed
// backward capture replays through every backend and the reference with no disagreement: replay
// unpacked the sequences, masked the padding and FA4's causal mask as FA4 applied them.
TEST(ForeignAttention, Fa4CleanRunIsCleanAndItsPackedBackwardReplays) {
  ScopedEnv fa4("PYTHONPATH", standIn());
  TrainedRun r =
      train("fa4-clean", "--capture-every 1", "--dtype float32 --varlen --steps 2", "flash_attn_training.py");
  ASSERT_EQ(r.report.code, 0) << r.train.out;
  EXPECT_EQ(r.doc["outcome"], "clean");
  EXPECT_EQ(r.doc["coverage"]["attention_calls"], 12);
  std::set<std::string> phases;
  for (const json& c : commandJson("calls", r.dir)) {
    EXPECT_EQ(c["backend"], "fa4");
    phases.insert(c["phase"].get<std::string>());
  }
  EXPECT_EQ(phases, (std::set<std::string>{"fwd", "bwd"}));
  fs::path backward;
  for (const auto& f : fs::directory_iterator(r.dir / "captures")) {
    if (f.path().filename().string().find("-layer2-call3-bwd-") != std::string::npos) backward = f.path();
  }
  ASSERT_FALSE(backward.empty()) << "the last layer's backward at step 1 was captured";
  Result replay = sh(nanprov() + " replay " + backward.string() + " --json");
  json d = json::parse(replay.out, nullptr, false);
  ASSERT_FALSE(d.is_discarded()) << replay.out;
  EXPECT_EQ(replay.code, 0) << replay.out;
  EXPECT_EQ(d["root_cause"]["class"], "none") << replay.out;
  int judged = 0;
  for (const json& b : d["backends"]) {
    if (b["status"] != "ran") continue;
    for (const auto& [role, t] : b["tensors"].items()) {
      EXPECT_EQ(t["verdict"], "ok") << b["name"] << " " << role;
      ++judged;
    }
  }
  EXPECT_GE(judged, 8) << "flash_cpu and math, O and the three gradients at least";

  for (std::string layout : {"", " --varlen"}) {
    std::string args = example("flash_attn_training.py") + " --dtype float32 --print-losses" + layout;
    Result plain = sh(python() + " " + args + " 2>/dev/null");
    Result probed = sh(nanprov() + " run --out " + runDir("fa4-identical").string() + " -- " + python() + " " + args +
                       " 2>/dev/null");
    EXPECT_NE(plain.out.find("step 3: loss 0x"), std::string::npos) << plain.out;
    EXPECT_EQ(plain.out, probed.out) << layout;
  }
}

std::string ffpaStandIn() { return std::string(NANPROV_TEST_SCRIPTS) + "/ffpa_standin"; }

// Seed 001's shape: a Gemma4-like model whose full-attention layers (head_dim 512, GQA) run FFPA and
// whose sliding-window layers (head_dim 256) call ffpa_attn_func too, which hands them to SDPA. FFPA
// is checked by default (no flag), forward and backward, its backward linked to its forward although
// Q is a transposed view (FFPA saves a copy of O); what it hands to SDPA is checked once, as SDPA.
// FFPA runs only on NVIDIA GPUs: a stand-in of ffpa-attn 0.2.4's layout and ops is imported instead.
TEST(ForeignAttention, FfpaIsCheckedByDefaultAndItsOverflowIsFoundAtItsStepAndLayer) {
  ScopedEnv ffpa("PYTHONPATH", ffpaStandIn());
  TrainedRun r = train("ffpa", "", "--layers 2 --steps 3 --overflow-layer 1 --overflow-step 2", "gemma4_ffpa.py");
  ASSERT_EQ(r.report.code, 1) << r.train.out;
  const json& e = r.doc["first_edge"];
  expectFields(e, {{"step", 2},
                   {"layer", 1},
                   {"phase", "fwd"},
                   {"module", "layers.1.self_attn"},
                   {"op", "ffpa_attn_func"},
                   {"backend", "ffpa"}});
  EXPECT_EQ(strings(e["nonfinite_outputs"]), std::vector<std::string>{"O"});
  EXPECT_EQ(r.doc["coverage"]["attention_calls"], 12) << "2 layers x 3 steps, forward and backward, each once";
  std::map<std::string, int> ffpa_calls;
  for (const json& c : commandJson("calls", r.dir)) {
    if (c["layer"] == 1) {
      EXPECT_EQ(c["backend"], "ffpa") << c.dump();
      EXPECT_EQ(c["module"], "layers.1.self_attn") << c.dump();
      ++ffpa_calls[c["phase"].get<std::string>()];
    } else {
      EXPECT_NE(c["backend"], "ffpa") << "head_dim 256 goes to SDPA and is checked there: " << c.dump();
    }
  }
  EXPECT_EQ(ffpa_calls, (std::map<std::string, int>{{"bwd", 3}, {"fwd", 3}}));

  // Replay reruns the captured call through FFPA's own package too: it overflows there as in every
  // low-precision backend, while the float64 reference stays finite.
  Result replay = sh(nanprov() + " replay " + r.dir.string() + " --json");
  json d = json::parse(replay.out, nullptr, false);
  ASSERT_FALSE(d.is_discarded()) << replay.out;
  EXPECT_EQ(d["root_cause"]["class"], "precision-limit") << replay.out;
  bool ffpa_ran = false;
  for (const json& b : d["backends"]) {
    if (b["name"] != "ffpa") continue;
    ffpa_ran = b["status"] == "ran";
    EXPECT_EQ(b["tensors"]["O"]["verdict"], "non-finite") << b.dump();
  }
  EXPECT_TRUE(ffpa_ran) << replay.out;
  // Where the package does not import, replay says so.
  ScopedEnv no_package("PYTHONPATH", "");
  Result unrun = sh(nanprov() + " replay " + r.dir.string() + " --backends math,ffpa --json");
  json u = json::parse(unrun.out, nullptr, false);
  ASSERT_FALSE(u.is_discarded()) << unrun.out;
  for (const json& b : u["backends"]) {
    if (b["name"] != "ffpa") continue;
    EXPECT_EQ(b["status"], "unsupported") << b.dump();
    EXPECT_NE(b["detail"].get<std::string>().find("not importable with"), std::string::npos) << b.dump();
    EXPECT_NE(b["detail"].get<std::string>().find("ffpa_attn"), std::string::npos) << b.dump();
  }
}

// A clean FFPA backward, captured, replays through FFPA's own package and every backend with no
// disagreement: dQ, dK and dV (GQA: K and V have one head) from the captured dO, mask and scale.
TEST(ForeignAttention, FfpaBackwardCaptureReplaysThroughItsOwnPackage) {
  ScopedEnv ffpa("PYTHONPATH", ffpaStandIn());
  TrainedRun r = train("ffpa-clean", "--capture 'layer=1,phase=bwd,step=0'", "--layers 2 --steps 1", "gemma4_ffpa.py");
  ASSERT_EQ(r.report.code, 0) << r.train.out;
  fs::path backward;
  for (const auto& f : fs::directory_iterator(r.dir / "captures")) {
    if (f.path().filename().string().find("-layer1-") != std::string::npos) backward = f.path();
  }
  ASSERT_FALSE(backward.empty()) << "layer 1's backward at step 0 was captured";
  Result replay = sh(nanprov() + " replay " + backward.string() + " --json");
  json d = json::parse(replay.out, nullptr, false);
  ASSERT_FALSE(d.is_discarded()) << replay.out;
  EXPECT_EQ(d["phase"], "bwd") << replay.out;
  EXPECT_EQ(d["root_cause"]["class"], "none") << replay.out;
  std::set<std::string> judged;
  for (const json& b : d["backends"]) {
    if (b["name"] != "ffpa") continue;
    EXPECT_EQ(b["status"], "ran") << b.dump();
    for (const auto& [role, t] : b["tensors"].items()) {
      EXPECT_EQ(t["verdict"], "ok") << role;
      judged.insert(role);
    }
  }
  EXPECT_EQ(judged, (std::set<std::string>{"dQ", "dK", "dV"})) << replay.out;
}

// Compiled FlexAttention runs as Inductor's own kernels; the bracket the bootstrap's pass puts in
// the graph checks each call, named by the graph's module stack. Its capture lacks the score_mod,
// and replay says it cannot judge the call rather than blaming nondeterminism.
TEST(ForeignAttention, CompiledFlexAttentionIsCheckedInsideTheGraph) {
  ColdInductorCache cold("compiled-flex");
  TrainedRun clean = train("flex-compiled", "", "--compile", "flex_attention.py");
  ASSERT_EQ(clean.report.code, 0) << clean.train.out;
  EXPECT_EQ(clean.doc["coverage"]["attention_calls"], 6) << "3 layers x 2 forward passes";
  EXPECT_TRUE(clean.doc["coverage"]["unprobed"].empty()) << clean.report.out;
  std::set<std::string> modules;
  for (const json& c : commandJson("calls", clean.dir)) modules.insert(c["module"].get<std::string>());
  EXPECT_EQ(modules, (std::set<std::string>{"layers.0", "layers.1", "layers.2"}));

  TrainedRun bad = train("flex-compiled-bad", "", "--compile --bad-layer 1", "flex_attention.py");
  ASSERT_EQ(bad.report.code, 1) << bad.train.out;
  EXPECT_EQ(bad.doc["first_edge"]["step"], 0);
  EXPECT_EQ(bad.doc["first_edge"]["layer"], 1);
  EXPECT_EQ(bad.doc["first_edge"]["module"], "layers.1");
  EXPECT_EQ(bad.doc["first_edge"]["op"], "flex_attention");
  Result replay = sh(nanprov() + " replay " + bad.dir.string() + " --json");
  json d = json::parse(replay.out, nullptr, false);
  ASSERT_FALSE(d.is_discarded()) << replay.out;
  EXPECT_NE(d["note"].get<std::string>().find("compiled FlexAttention"), std::string::npos) << d["note"];
  EXPECT_EQ(d["root_cause"]["class"], "cannot-judge") << replay.out;
  EXPECT_NE(d["root_cause"]["explanation"].get<std::string>().find("cannot judge"), std::string::npos) << replay.out;

  std::string args = example("flex_attention.py") + " --compile --print-outputs";
  Result plain, probed;
  {
    ColdInductorCache plain_cache("compiled-flex-plain");
    plain = sh(python() + " " + args + " 2>/dev/null");
  }
  {
    ColdInductorCache probed_cache("compiled-flex-probed");
    probed = sh(nanprov() + " run --out " + runDir("flex-compiled-identical").string() + " -- " + python() + " " +
                args + " 2>/dev/null");
  }
  EXPECT_NE(plain.out.find("0x"), std::string::npos) << plain.out;
  EXPECT_EQ(plain.out, probed.out);
}

}  // namespace

namespace {
using namespace e2e;

// --probe-op, the generic dispatcher path: a script defines a library's own attention op (mylib::attn,
// O an out buffer) after torch is imported, as libraries do. Found at its forward pass and layer,
// replayed; the training untouched. The retired 'ffpa' preset (FFPA is checked by default) is
// accepted and said to add nothing.
TEST(ForeignAttention, ProbeOpProbesALibraryOpDefinedAfterTorch) {
  std::string script = python() + " " + std::string(NANPROV_TEST_SCRIPTS) + "/library_op_attention.py";
  const std::string spec = "'mylib::attn:q=Q,k=K,v=V,o=O'";
  fs::path dir = runDir("probe-op");
  Result run =
      sh(nanprov() + " run --out " + dir.string() + " --probe-op " + spec + " -- " + script + " --glitch-pass 1 2>&1");
  ASSERT_EQ(run.code, 1) << "the script exits 0; nanprov found the edge: " << run.out;
  json report = commandJson("report", dir);
  const json& e = report["first_edge"];
  EXPECT_EQ(e["step"], 1) << report.dump();
  expectFields(e, {{"layer", 0}, {"module", "layers.0"}, {"op", "mylib::attn"}, {"backend", "mylib"}});
  EXPECT_EQ(strings(e["nonfinite_outputs"]), std::vector<std::string>{"O"});
  EXPECT_EQ(report["coverage"]["attention_calls"], 6) << "2 layers x 3 forward passes";
  Result replay = sh(nanprov() + " replay " + dir.string() + " --json");
  EXPECT_NE(replay.out.find("precision-limit"), std::string::npos) << replay.out;

  Result plain = sh(script + " 2>/dev/null");
  Result probed = sh(nanprov() + " run --out " + runDir("probe-op-identical").string() + " --probe-op " + spec +
                     " -- " + script + " 2>/dev/null");
  EXPECT_NE(plain.out.find("pass 2: "), std::string::npos) << plain.out;
  EXPECT_EQ(plain.out, probed.out);

  // An op that never appears is said at exit. The library's CPU kernel computes softmax attention
  // in plain ops, which nanprov checks by default (issue 48): the run is clean because each of its
  // 6 calls was checked there, not because the op went unseen.
  fs::path none = runDir("probe-op-none");
  Result missing = sh(nanprov() + " run --out " + none.string() + " --probe-op 'nolib::attn' -- " + script + " 2>&1");
  EXPECT_NE(missing.out.find("--probe-op 'nolib::attn': no operator nolib::attn is registered"), std::string::npos)
      << missing.out;
  json unprobed = commandJson("report", none);
  EXPECT_EQ(unprobed["outcome"], "clean") << unprobed.dump();
  EXPECT_EQ(unprobed["coverage"]["attention_calls"], 6) << unprobed.dump();
  EXPECT_EQ(sh(nanprov() + " run --out " + runDir("probe-op-bad").string() + " --probe-op 'attn' -- true").code, 2);
  Result retired = sh(nanprov() + " run --out " + runDir("probe-op-ffpa").string() + " --probe-op ffpa -- true 2>&1");
  EXPECT_EQ(retired.code, 0) << retired.out;
  EXPECT_NE(retired.out.find("FFPA is checked by default"), std::string::npos) << retired.out;
}

}  // namespace
