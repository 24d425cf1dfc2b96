// End-to-end: `nanprov run --trail` names the first module that made a non-finite value outside
// attention, forward and backward, in real CPU training. The answer is checked against the
// training script's own plain-PyTorch hooks (scripts/trail_faults.py --oracle), run in the same
// process, which print the first module whose output went non-finite from finite inputs.
#include <gtest/gtest.h>

#include <regex>
#include <tuple>

#include "tests/e2e/e2e_support.h"

namespace {
using namespace e2e;

std::string faults() { return std::string(NANPROV_TEST_SCRIPTS) + "/trail_faults.py"; }

TrainedRun trained(const std::string& name, const std::string& nanprov_opts, const std::string& script_args) {
  return train(name, nanprov_opts, script_args, faults());
}

// What the script's hooks found: {step, phase, module}.
json oracleOf(const std::string& out) {
  std::smatch m;
  static const std::regex line("oracle: step (\\d+) phase (fwd|bwd) module (\\S+)");
  if (!std::regex_search(out, m, line)) return nullptr;
  return {{"step", std::stoi(m[1])}, {"phase", m[2]}, {"module", m[3]}};
}

// The run's first_module is the oracle's answer, made from finite inputs, and the upstream edge
// says so in the text report.
void expectNamedAsTheOracleSays(const TrainedRun& r, const std::string& cls, const std::string& phase) {
  ASSERT_EQ(r.report.code, 1) << r.train.out << r.report.out;
  const json oracle = oracleOf(r.train.out);
  ASSERT_TRUE(oracle.is_object()) << r.train.out;
  EXPECT_EQ(oracle["phase"], phase);
  const json& m = r.doc["first_module"];
  ASSERT_TRUE(m.is_object()) << r.report.out;
  expectFields(m, {{"rank", 0},
                   {"step", oracle["step"]},
                   {"phase", oracle["phase"]},
                   {"module", oracle["module"]},
                   {"class", cls},
                   {"inputs_finite", true}});
  EXPECT_GT(m["nonfinite"].get<int64_t>(), 0);
  EXPECT_GT(m["largest_input"].get<double>(), 0.0);
  EXPECT_EQ(r.doc["trail"]["on"], true);
  EXPECT_EQ(r.doc["first_edge"]["origin"], "upstream") << "the values reached attention from the module";
  Result text = sh(nanprov() + " report " + r.dir.string());
  const std::string named = phase == "fwd"
                                ? "the first non-finite value was the output of " +
                                      oracle["module"].get<std::string>() + " (" + cls + "), from finite inputs"
                                : "the first non-finite value was the gradient that the backward of " +
                                      oracle["module"].get<std::string>() + " (" + cls + ") sent to its input";
  EXPECT_NE(text.out.find(named), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("reached attention from upstream: " + named), std::string::npos) << text.out;
}

// A LayerNorm whose weight overflows its output at step 2: named in the forward.
TEST(Trail, NamesTheLayerNormThatOverflowedInTheForward) {
  TrainedRun r = trained("trail-ln", "--trail", "--oracle --fault ln");
  expectNamedAsTheOracleSays(r, "LayerNorm", "fwd");
  EXPECT_EQ(r.doc["first_module"]["module"], "transformer.h.0.ln_1");
  EXPECT_EQ(r.doc["first_module"]["step"], 2);
  EXPECT_EQ(r.doc["first_edge"]["layer"], 0);
}

// The MLP's first Linear overflows: named, not the attention of the next layer that receives it.
TEST(Trail, NamesTheMlpLinearThatOverflowedInTheForward) {
  TrainedRun r = trained("trail-mlp", "--trail", "--oracle --fault mlp");
  expectNamedAsTheOracleSays(r, "Linear", "fwd");
  EXPECT_EQ(r.doc["first_module"]["module"], "transformer.h.0.mlp.c_fc");
  EXPECT_EQ(r.doc["first_edge"]["layer"], 1) << "attention first saw it in the next layer";
}

// An activation whose hand-written backward turns finite gradients into Inf: named in the
// backward, at its step, though its forward was finite.
TEST(Trail, NamesTheActivationWhoseBackwardMadeInf) {
  TrainedRun r = trained("trail-act", "--trail", "--oracle --fault act-backward");
  expectNamedAsTheOracleSays(r, "Act", "bwd");
  EXPECT_EQ(r.doc["first_module"]["module"], "transformer.h.0.mlp.act");
  EXPECT_EQ(r.doc["first_module"]["step"], 2);
  EXPECT_EQ(r.doc["first_edge"]["phase"], "bwd");
}

// Under activation checkpointing, both kinds, the answer is the eager one: the recomputed forward
// is not a second first module, and the backward is judged where autograd runs it.
TEST(Trail, CheckpointedBlocksGiveTheEagerAnswer) {
  for (std::string mode : {"reentrant", "non-reentrant"}) {
    for (auto [fault, module, phase] : {std::tuple{"ln", "transformer.h.0.ln_1", "fwd"},
                                        std::tuple{"act-backward", "transformer.h.0.mlp.act", "bwd"}}) {
      SCOPED_TRACE(mode + " " + fault);
      TrainedRun r = trained(std::string("trail-ckpt-") + fault, "--trail",
                             std::string("--fault ") + fault + " --checkpoint " + mode);
      ASSERT_EQ(r.report.code, 1) << r.train.out;
      expectFields(r.doc["first_module"], {{"step", 2}, {"phase", phase}, {"module", module}, {"inputs_finite", true}});
    }
  }
}

// The compiled twin. No module hook runs inside torch.compile'd code, so the check is put into the
// graph, reading only values Inductor writes to memory anyway. ln_1's output feeds a Linear, so it
// is read, and the LayerNorm is named as the eager run's hooks name it. Its input, wte's output,
// feeds only the LayerNorm and a sum, so it is not read: wte is named as having run unchecked
// before it. The oracle runs eagerly: its own hooks would break the compiled graph.
TEST(Trail, CompiledTwinNamesTheModuleTheEagerHooksName) {
  ColdInductorCache cache("trail-compiled");
  const json oracle = oracleOf(sh(python() + " " + faults() + " --oracle --fault ln 2>&1").out);
  ASSERT_TRUE(oracle.is_object());
  TrainedRun r = trained("trail-compiled", "--trail", "--fault ln --compile");
  ASSERT_EQ(r.report.code, 1) << r.train.out;
  ASSERT_TRUE(r.doc["first_module"].is_object()) << r.train.out << r.report.out;
  expectFields(r.doc["first_module"], {{"step", oracle["step"]},
                                       {"phase", oracle["phase"]},
                                       {"module", oracle["module"]},
                                       {"class", "LayerNorm"},
                                       {"inputs_finite", true}});
  EXPECT_EQ(r.doc["first_module"]["unchecked_before"], json::array({"transformer.wte"}));
  expectFields(r.doc["trail"],
               {{"on", true}, {"compiled_code_unchecked", false}});  // its backward graph was checked too
}

// With nn.GELU the whole model is one graph, and Inductor fuses c_fc's output into the GELU's
// kernel: it is never written, so it is not read either (that could change the losses). The first
// module checked after it is named, with c_fc as the module that ran unchecked before it.
TEST(Trail, CompiledFusedValueNamesTheNextModuleAndWhatRanUnchecked) {
  ColdInductorCache cache("trail-compiled-fused");
  TrainedRun r = trained("trail-compiled-fused", "--trail", "--fault mlp --act gelu --compile");
  ASSERT_EQ(r.report.code, 1) << r.train.out;
  ASSERT_TRUE(r.doc["first_module"].is_object()) << r.train.out << r.report.out;
  expectFields(r.doc["first_module"], {{"step", 2},
                                       {"phase", "fwd"},
                                       {"module", "transformer.h.0.mlp.act"},
                                       {"class", "GELU"},
                                       {"inputs_finite", true}});
  EXPECT_EQ(r.doc["first_module"]["unchecked_before"], json::array({"transformer.h.0.mlp.c_fc"}));
  Result text = sh(nanprov() + " report " + r.dir.string());
  EXPECT_NE(text.out.find("the output of transformer.h.0.mlp.act (GELU), from finite inputs"), std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("transformer.h.0.mlp.c_fc ran unchecked between those inputs and it, and may have made it"),
            std::string::npos)
      << text.out;
}

// The user's own module hooks (here the oracle's, which read values on the host) break the
// compiled graph at every module call. Those calls then run eagerly, but Dynamo compiles every
// frame they run, the trail's hook included, which compiled to nothing; its frame is now left
// eager, so each module is checked by the hook as in eager mode, and named as the oracle names it.
TEST(Trail, CompiledCodeBrokenByTheUsersHooksIsCheckedAsInEagerMode) {
  ColdInductorCache cache("trail-compiled-hooked");
  TrainedRun r = trained("trail-compiled-hooked", "--trail", "--oracle --fault mlp --act gelu --compile");
  expectNamedAsTheOracleSays(r, "Linear", "fwd");
  EXPECT_EQ(r.doc["first_module"]["module"], "transformer.h.0.mlp.c_fc");
  EXPECT_EQ(r.doc["first_module"]["unchecked_before"], json::array());
}

// A compiled backward runs as one graph AOTAutograd made, with no module hooks; its nodes keep the
// module of the forward node they differentiate, and the trail's checks go in after each module's
// written gradients. The hand-written Function's backward (traced inside h.0.mlp.act) turns the
// gradient into Inf at step 2: named as the eager run's own hooks name it.
TEST(Trail, CompiledBackwardNamesTheModuleTheEagerHooksName) {
  ColdInductorCache cache("trail-compiled-bwd");
  const json oracle = oracleOf(sh(python() + " " + faults() + " --oracle --fault act-backward 2>&1").out);
  ASSERT_TRUE(oracle.is_object());
  ASSERT_EQ(oracle["phase"], "bwd");
  TrainedRun r = trained("trail-compiled-bwd", "--trail", "--fault act-backward --compile");
  ASSERT_EQ(r.report.code, 1) << r.train.out;
  EXPECT_EQ(r.doc["first_edge"]["origin"], "upstream");
  ASSERT_TRUE(r.doc["first_module"].is_object()) << r.train.out << r.report.out;
  expectFields(r.doc["first_module"], {{"step", oracle["step"]},
                                       {"phase", "bwd"},
                                       {"module", oracle["module"]},
                                       {"class", "Act"},
                                       {"inputs_finite", true}});
  expectFields(r.doc["trail"], {{"on", true}, {"compiled_code_unchecked", false}});
  Result text = sh(nanprov() + " report " + r.dir.string());
  EXPECT_NE(
      text.out.find("the gradient that the backward of transformer.h.0.mlp.act (Act) sent to its input, from finite "
                    "incoming gradients"),
      std::string::npos)
      << text.out;
}

// One graph compiled from a block's forward runs for every block: its backward has no wrapper to
// say which block it runs for, so the modules inside it are not checked, and the run says so. The
// blocks themselves run eagerly around it: their hooks still name the block whose backward made it.
TEST(Trail, CompiledBackwardServingSeveralBlocksIsSaidToBeUnchecked) {
  ColdInductorCache cache("trail-compiled-blocks-bwd");
  TrainedRun r = trained("trail-compiled-blocks-bwd", "--trail", "--fault act-backward --compile-blocks");
  ASSERT_EQ(r.report.code, 1) << r.train.out;
  EXPECT_NE(r.train.out.find(
                "--trail: a compiled backward's modules are not checked (its forward graph serves several places)"),
            std::string::npos)
      << r.train.out;
  EXPECT_EQ(r.doc["first_edge"]["origin"], "upstream");
  ASSERT_TRUE(r.doc["first_module"].is_object()) << r.report.out;
  expectFields(
      r.doc["first_module"],
      {{"step", 2}, {"phase", "bwd"}, {"module", "transformer.h.0"}, {"class", "Block"}, {"inputs_finite", true}});
  expectFields(r.doc["trail"], {{"on", true}, {"compiled_code_unchecked", true}});
}

// The trail only reads: every loss, and the weights' sum after each step, is bit for bit what the
// script prints without nanprov, also with its checks inside a compiled bf16 graph (SwiGLU, whose
// fused product Inductor keeps in fp32).
TEST(Trail, LeavesTheLossesBitIdentical) {
  ColdInductorCache cache("trail-identical");
  int n = 0;
  for (std::string args : {"--fault none", "--fault act-backward", "--fault act-backward --compile",
                           "--fault none --compile --act swiglu --dtype bfloat16 --d-model 64"}) {
    SCOPED_TRACE(args);
    Result plain = sh(python() + " " + faults() + " --steps 3 " + args + " 2>/dev/null | grep '^step'");
    // A "--trail: ... not checked" line would mean the checks never went into the graph.
    Result probed =
        sh(nanprov() + " run --out " + runDir("trail-identical-" + std::to_string(n++)).string() + " --trail -- " +
           python() + " " + faults() + " --steps 3 " + args + " 2>&1 | grep -E '^step|--trail:'");
    ASSERT_EQ(plain.code, 0);
    EXPECT_NE(plain.out.find("step 2: loss"), std::string::npos) << plain.out;
    EXPECT_EQ(probed.out, plain.out);
  }
}

// Without --trail nothing is named, and the report says what would name it.
TEST(Trail, WithoutTrailTheReportSaysTrailWouldNameIt) {
  TrainedRun r = trained("trail-off", "", "--fault ln");
  ASSERT_EQ(r.report.code, 1) << r.train.out;
  EXPECT_EQ(r.doc["first_module"], nullptr);
  EXPECT_EQ(r.doc["trail"]["on"], false);
  EXPECT_EQ(r.doc["first_edge"]["origin"], "upstream");
  Result text = sh(nanprov() + " report " + r.dir.string());
  EXPECT_NE(text.out.find("reached attention from upstream: the origin is outside attention (nanprov run --trail names "
                          "the module that made it)"),
            std::string::npos)
      << text.out;
}

std::string batches() { return std::string(NANPROV_TEST_SCRIPTS) + "/trail_batches.py"; }

// What the script's hooks found: the first module whose output went non-finite, and whether every
// tensor it received (walked through the nested batch) was finite.
std::pair<std::string, std::string> firstNonFiniteOf(const std::string& out) {
  std::smatch m;
  static const std::regex line("oracle: step 2 phase fwd first (\\S+) inputs (finite|non-finite)");
  if (!std::regex_search(out, m, line)) return {};
  return {m[1], m[2]};
}

// `forward(batch)` with the batch in a list and in a dict, a NaN in its data: every module call
// sees every tensor it receives, so the outermost module (which received the batch) is never
// said to have made the NaN from finite inputs; the first module that received it is named, and
// the value came from outside any module, as the script's own hooks say.
TEST(Trail, ANanInANestedBatchCameFromOutsideAnyModule) {
  for (std::string batch : {"list", "dict"}) {
    SCOPED_TRACE(batch);
    TrainedRun r = train("trail-batch-data-" + batch, "--trail", "--oracle --fault data --batch " + batch, batches());
    ASSERT_EQ(r.report.code, 1) << r.train.out << r.report.out;
    EXPECT_EQ(firstNonFiniteOf(r.train.out), std::make_pair(std::string("embed"), std::string("non-finite")))
        << r.train.out;
    expectFields(r.doc["first_module"], {{"step", 2},
                                         {"phase", "fwd"},
                                         {"module", "embed"},
                                         {"class", "Linear"},
                                         {"inputs_finite", false},
                                         {"inputs", "non_finite"}});
    Result text = sh(nanprov() + " report " + r.dir.string());
    EXPECT_NE(text.out.find("the first non-finite value was the output of embed (Linear), whose inputs were already "
                            "non-finite: they came from outside any module"),
              std::string::npos)
        << text.out;
    EXPECT_EQ(text.out.find("the outermost module"), std::string::npos) << text.out;
    EXPECT_EQ(text.out.find("from finite inputs"), std::string::npos) << text.out;
  }
}

// The same batches, the NaN made inside a module from finite data: that module is named.
TEST(Trail, ANanMadeByAModuleFromANestedBatchNamesTheModule) {
  for (std::string batch : {"list", "dict"}) {
    SCOPED_TRACE(batch);
    TrainedRun r = train("trail-batch-embed-" + batch, "--trail", "--oracle --fault embed --batch " + batch, batches());
    ASSERT_EQ(r.report.code, 1) << r.train.out << r.report.out;
    EXPECT_EQ(firstNonFiniteOf(r.train.out), std::make_pair(std::string("embed"), std::string("finite")))
        << r.train.out;
    expectFields(r.doc["first_module"], {{"step", 2},
                                         {"phase", "fwd"},
                                         {"module", "embed"},
                                         {"class", "Linear"},
                                         {"inputs_finite", true},
                                         {"inputs", "finite"}});
    Result text = sh(nanprov() + " report " + r.dir.string());
    EXPECT_NE(text.out.find("the first non-finite value was the output of embed (Linear), from finite inputs"),
              std::string::npos)
        << text.out;
  }
}

// When attention itself made the first non-finite value, the trail names no module: the report's
// answer is the attention edge.
TEST(Trail, NamesNoModuleWhenAttentionMadeIt) {
  TrainedRun r = train("trail-attention", "--trail", "--steps 4 --glitch-step 2 --glitch-scale 1e20");
  ASSERT_EQ(r.report.code, 1) << r.train.out;
  EXPECT_EQ(r.doc["first_edge"]["origin"], "attention");
  EXPECT_EQ(r.doc["trail"]["on"], true);
  EXPECT_EQ(r.doc["first_module"], nullptr) << r.report.out;
}

}  // namespace

namespace {
using namespace e2e;

// On CUDA (the H200; skipped without a GPU): a bf16 model that diverges by itself at a high
// learning rate, no fault planted. The checks run on the device, asynchronously; the first module
// named is the one the script's hooks find.
TEST(TrailGpu, Bf16DivergenceNamesTheFirstModuleAsHooksDo) {
  if (!torchHasCuda()) GTEST_SKIP() << "torch has no CUDA device here";
  for (std::string lr : {"1e2", "1e3"}) {
    SCOPED_TRACE("lr " + lr);
    TrainedRun r = trained("trail-gpu-" + lr, "--trail",
                           "--oracle --device cuda --dtype bfloat16 --d-model 64 --steps 5 --lr " + lr);
    ASSERT_EQ(r.report.code, 1) << r.train.out;
    const json oracle = oracleOf(r.train.out);
    ASSERT_TRUE(oracle.is_object()) << "the training did not diverge: " << r.train.out;
    if (oracle["module"].get<std::string>().ends_with(".attn")) {
      // The attention call itself made it (at lr 1e3 the bf16 scores overflow from finite Q, K):
      // nanprov's answer is that call's source edge, and no module outside attention is named.
      EXPECT_TRUE(r.doc["first_module"].is_null()) << r.doc["first_module"].dump();
      expectFields(r.doc["first_edge"], {{"origin", "attention"},
                                         {"step", oracle["step"]},
                                         {"phase", oracle["phase"]},
                                         {"module", oracle["module"]}});
    } else {
      ASSERT_TRUE(r.doc["first_module"].is_object())
          << "no module named; the oracle says " << oracle.dump() << "; the first edge: " << r.doc["first_edge"].dump();
      expectFields(r.doc["first_module"],
                   {{"step", oracle["step"]}, {"phase", oracle["phase"]}, {"module", oracle["module"]}});
    }
    EXPECT_EQ(r.doc["ranks"][0]["meta"].value("host_syncs", "0"), "0") << "the trail's checks never wait for the GPU";
  }
}

// On CUDA in float32, SDPA runs memory-efficient attention, whose LSE is padded to 32 query rows
// with +inf (8 rows here): a clean run is clean, eager and compiled; and the compiled backward's
// checks name the hand-written Function's module as the eager hooks do, with no host sync.
TEST(TrailGpu, Float32CompiledBackwardNamesTheModuleAndPaddedLsesStayClean) {
  if (!torchHasCuda()) GTEST_SKIP() << "torch has no CUDA device here";
  for (std::string how : {"", " --compile"}) {
    SCOPED_TRACE("clean" + how);
    TrainedRun clean = trained("trail-gpu-f32-clean" + std::string(how.empty() ? "" : "-compiled"), "--trail",
                               "--device cuda --fault none" + how);
    EXPECT_EQ(clean.report.code, 0) << clean.report.out;
  }
  const json oracle = oracleOf(sh(python() + " " + faults() + " --device cuda --oracle --fault act-backward 2>&1").out);
  ASSERT_TRUE(oracle.is_object());
  TrainedRun r = trained("trail-gpu-f32-bwd", "--trail", "--device cuda --fault act-backward --compile");
  ASSERT_EQ(r.report.code, 1) << r.train.out;
  ASSERT_TRUE(r.doc["first_module"].is_object()) << r.report.out;
  expectFields(r.doc["first_module"],
               {{"step", oracle["step"]}, {"phase", "bwd"}, {"module", oracle["module"]}, {"inputs_finite", true}});
  EXPECT_EQ(r.doc["ranks"][0]["meta"].value("host_syncs", "0"), "0");
}

}  // namespace
