// End-to-end: training as people run it (torch.compile, activation checkpointing, inference,
// nested module paths) and runs whose NaN starts outside attention or that have no attention at
// all. Each is real CPU training under `nanprov run`, judged by what `nanprov report` says.
#include <gtest/gtest.h>

#include <set>

#include "tests/e2e/e2e_support.h"

namespace {
using namespace e2e;

// The facts of an edge that must not depend on how the model was run.
json identity(const json& edge) {
  return {{"step", edge["step"]},     {"phase", edge["phase"]},   {"layer", edge["layer"]},
          {"module", edge["module"]}, {"origin", edge["origin"]}, {"outputs", edge["nonfinite_outputs"]}};
}

TEST(TrainingModes, CompiledForwardSourceEdgeIsTheEagerOne) {
  std::string glitch = "--steps 4 --glitch-step 2 --glitch-scale 1e20";
  TrainedRun eager = train("eager-fwd", "", glitch);
  ColdInductorCache cold("compiled-fwd");
  TrainedRun compiled = train("compiled-fwd", "", glitch + " --compile max-autotune-no-cudagraphs --fullgraph");
  ASSERT_EQ(compiled.train.code, runCodeForCleanExit(compiled)) << compiled.train.out;
  ASSERT_EQ(eager.report.code, 1) << eager.train.out;
  ASSERT_EQ(compiled.report.code, 1) << compiled.train.out;
  EXPECT_EQ(identity(compiled.doc["first_edge"]), identity(eager.doc["first_edge"]));
  EXPECT_EQ(compiled.doc["first_edge"]["module"], "layers.0.attn") << "from the compiled graph's module stack";
  EXPECT_EQ(compiled.train.out.find("probe failed"), std::string::npos) << compiled.train.out;
}

// The compiled graph's attention backward is Inductor's extern call to the same ATen op: checked
// and named like the eager one, in both modes, from a cold cache (what a first run compiles).
TEST(TrainingModes, CompiledInjectedBackwardEdgeIsTheEagerOne) {
  std::string inject = "--inject 'layer=1,phase=bwd,tensor=dQ,step=1'";
  TrainedRun eager = train("eager-bwd", inject, "--steps 3");
  ASSERT_EQ(eager.report.code, 1) << eager.train.out;
  for (std::string mode : {"default", "max-autotune-no-cudagraphs"}) {
    SCOPED_TRACE(mode);
    ColdInductorCache cold("compiled-bwd-" + mode);
    TrainedRun compiled = train("compiled-bwd", inject, "--steps 3 --compile " + mode);
    ASSERT_EQ(compiled.train.code, runCodeForCleanExit(compiled)) << compiled.train.out;
    ASSERT_EQ(compiled.report.code, 1) << compiled.train.out;
    EXPECT_EQ(identity(compiled.doc["first_edge"]), identity(eager.doc["first_edge"]));
    EXPECT_EQ(compiled.doc["first_edge"]["name"], eager.doc["first_edge"]["name"]);
    EXPECT_TRUE(compiled.doc["coverage"]["unprobed"].empty()) << compiled.report.out;
    EXPECT_EQ(commandJson("calls", compiled.dir, "--phase bwd").size(), 6u) << "every compiled backward was checked";
  }
}

TEST(TrainingModes, CheckpointedLayersKeepTheirIdentityInBothModes) {
  for (std::string mode : {"reentrant", "nonreentrant"}) {
    SCOPED_TRACE(mode);
    TrainedRun r = train("ckpt-" + mode, "--inject 'layer=2,phase=bwd,tensor=dQ,step=1'",
                         "--steps 3 --layers 4 --checkpoint " + mode);
    ASSERT_EQ(r.train.code, runCodeForCleanExit(r)) << r.train.out;
    ASSERT_EQ(r.report.code, 1) << r.train.out;
    const json& e = r.doc["first_edge"];
    expectFields(e, {{"layer", 2}, {"module", "layers.2.attn"}, {"phase", "bwd"}, {"step", 1}});
    json layers = commandJson("sql", r.dir,
                              "\"SELECT step, COUNT(DISTINCT layer) AS n, SUM(recompute) AS recomputed, "
                              "COUNT(DISTINCT module) AS modules FROM calls GROUP BY step\"");
    ASSERT_EQ(layers.size(), 3u) << layers.dump();
    for (const json& row : layers) {
      EXPECT_EQ(row["n"], 4) << "as many layers per step as the model has";
      EXPECT_EQ(row["modules"], 4);
      EXPECT_EQ(row["recomputed"], 4) << "each layer's forward recomputed once, flagged";
    }
  }
}

TEST(TrainingModes, CheckpointedForwardEdgeIsTheOriginalCall) {
  TrainedRun r = train("ckpt-fwd", "", "--steps 4 --layers 4 --checkpoint nonreentrant --glitch-step 2");
  ASSERT_EQ(r.report.code, 1) << r.train.out;
  EXPECT_EQ(r.doc["first_edge"]["module"], "layers.0.attn");
  EXPECT_EQ(r.doc["first_edge"]["recompute"], false);
  EXPECT_EQ(r.doc["first_edge"]["step"], 2);
}

TEST(TrainingModes, HuggingFaceGradientCheckpointing) {
  TrainedRun r = train("hf-ckpt", "--inject 'layer=1,phase=bwd,tensor=dK,step=1'", "--steps 2 --gradient-checkpointing",
                       "hf_llama.py");
  ASSERT_EQ(r.report.code, 1) << r.train.out;
  EXPECT_EQ(r.doc["first_edge"]["module"], "model.layers.1.self_attn");
  EXPECT_EQ(r.doc["first_edge"]["phase"], "bwd");
  json layers = commandJson("sql", r.dir, "\"SELECT COUNT(DISTINCT layer) AS n FROM calls\"");
  EXPECT_EQ(layers[0]["n"], 2) << layers.dump();
}

TEST(TrainingModes, InferenceNamesTheForwardPass) {
  TrainedRun r = train("eval", "", "--steps 5 --eval --glitch-step 3");
  ASSERT_EQ(r.train.code, runCodeForCleanExit(r)) << r.train.out;
  ASSERT_EQ(r.report.code, 1) << r.train.out;
  EXPECT_EQ(r.doc["step_unit"], "forward_pass");
  EXPECT_EQ(r.doc["first_edge"]["step"], 3) << "the bad batch is the fourth forward pass";
  EXPECT_EQ(r.doc["first_edge"]["phase"], "fwd");
  Result text = sh(nanprov() + " report " + r.dir.string());
  EXPECT_NE(text.out.find("forward pass 3, fwd"), std::string::npos) << text.out;
}

TEST(TrainingModes, NestedModulePathsGetDistinctLayers) {
  TrainedRun r = train("nested", "", "--steps 2 --layers 8 --stages 2 --glitch-step 1 --glitch-scale 1e20");
  ASSERT_EQ(r.report.code, 1) << r.train.out;
  json rows = commandJson("calls", r.dir, "--phase fwd --step 0");
  std::set<int64_t> layers;
  std::set<std::string> modules;
  for (const json& c : rows) {
    layers.insert(c["layer"].get<int64_t>());
    modules.insert(c["module"].get<std::string>());
  }
  EXPECT_EQ(layers.size(), 8u);
  EXPECT_EQ(modules.size(), 8u);
  EXPECT_EQ(r.doc["first_edge"]["module"], "stages.0.blocks.0.attn");
  json stage1 = commandJson("calls", r.dir, "--module 'stages.1.*' --phase fwd --step 0");
  EXPECT_EQ(stage1.size(), 4u);
}

TEST(TrainingModes, GradientSentinelNamesANaNMadeOutsideAttention) {
  TrainedRun r = train("sentinel", "", "--steps 5 --regulariser-nan-step 2");
  expectSentinelNamesTheRegulariser(r);
  if (HasFatalFailure()) return;
  ASSERT_FALSE(r.doc["first_edge"].is_null()) << "attention saw the NaN only later";
  EXPECT_GT(r.doc["first_edge"]["step"].get<int>(), 2);
  Result text = sh(nanprov() + " report " + r.dir.string());
  EXPECT_NE(text.out.find("origin is outside attention"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("head.weight"), std::string::npos) << text.out;
}

TEST(TrainingModes, NoAttentionIsNothingChecked) {
  TrainedRun r = train("no-attention", "", "--steps 2 --no-attention");
  ASSERT_EQ(r.train.code, runCodeForCleanExit(r)) << r.train.out;
  EXPECT_EQ(r.report.code, 4) << r.report.out;
  EXPECT_EQ(r.doc["outcome"], "nothing_checked");
  EXPECT_EQ(r.doc["clean"], false);
  EXPECT_EQ(r.doc["coverage"]["attention_calls"], 0);
  // No store (nothing was checked), but the rank ran: not "0 ranks" (issue 61).
  EXPECT_EQ(r.doc["summary"]["ranks"], 1) << r.report.out;
  EXPECT_EQ(r.doc["world_size"], 1) << r.report.out;
  Result text = sh(nanprov() + " report " + r.dir.string());
  EXPECT_EQ(text.out.rfind("nothing checked", 0), 0u) << text.out;
  EXPECT_NE(text.out.find(": 1 rank, 0 attention calls checked"), std::string::npos) << text.out;
}

TEST(TrainingModes, CrashBeforeAnyAttentionIsNothingChecked) {
  fs::path dir = runDir("crash-early");
  Result r =
      sh(nanprov() + " run --out " + dir.string() + " -- " + python() + " -c 'import torch; raise SystemExit(5)' 2>&1");
  EXPECT_EQ(r.code, 5) << r.out;
  Result report = sh(nanprov() + " report " + dir.string());
  EXPECT_EQ(report.code, 4) << report.out;
  EXPECT_NE(report.out.find("exited with code 5"), std::string::npos) << report.out;
}

// Plain and probed runs each compile from a cold cache of their own, so the probed run's graph is
// the one nanprov made Dynamo trace, not one a plain run left behind.
TEST(TrainingModes, LossesAreBitIdenticalCompiledAndCheckpointed) {
  for (std::string mode :
       {"--compile", "--compile max-autotune-no-cudagraphs", "--checkpoint nonreentrant", "--checkpoint reentrant"}) {
    SCOPED_TRACE(mode);
    std::string args = example("tiny_transformer.py") + " --steps 3 --print-losses " + mode;
    fs::path dir = runDir("identical-modes");
    Result probed, plain;
    {
      ColdInductorCache cold("identical-probed");
      probed = sh(nanprov() + " run --out " + dir.string() + " -- " + python() + " " + args + " 2>/dev/null");
    }
    {
      ColdInductorCache cold("identical-plain");
      plain = sh(python() + " " + args + " 2>/dev/null");
    }
    ASSERT_EQ(plain.code, 0);
    ASSERT_EQ(probed.code, 0);
    EXPECT_NE(plain.out.find("step2 loss 0x"), std::string::npos) << plain.out;
    EXPECT_EQ(plain.out, probed.out);
    EXPECT_EQ(sh(nanprov() + " report " + dir.string()).code, 0) << "checked, and clean";
  }
}

}  // namespace
