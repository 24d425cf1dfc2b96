// End-to-end on a CUDA GPU: real bf16 training under `nanprov run`, with the asynchronous fused
// checks and CUPTI attribution. Skips cleanly where torch has no CUDA device (CI); runs in
// scripts/device-check.sh on the H200.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "tests/e2e/e2e_support.h"

namespace {
using namespace e2e;

// The seed-004 class (pytorch#196678): a bool padding mask hiding whole query rows, S=64, bf16,
// default SDPA dispatch, which is cuDNN on Hopper.
const std::string kMaskedRowsRun =
    "--device cuda --dtype bfloat16 --seq 64 --d-model 256 --heads 2 --mask-rows --steps 3";

std::vector<std::string> issueIds(const json& issues) {
  std::vector<std::string> ids;
  for (const json& k : issues) ids.push_back(k.value("id", ""));
  return ids;
}

bool names(const json& issues, const std::string& id) {
  std::vector<std::string> ids = issueIds(issues);
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

bool anyKernelContains(const json& kernels, const std::string& part) {
  return std::any_of(kernels.begin(), kernels.end(),
                     [&](const json& k) { return k["name"].get<std::string>().find(part) != std::string::npos; });
}

TEST(Gpu, CudnnBackwardWritesNaNIntoDqForFullyMaskedRows) {
  REQUIRE_CUDA();
  TrainedRun r = train("gpu-cudnn", "", kMaskedRowsRun);
  ASSERT_EQ(r.train.code, runCodeForCleanExit(r)) << r.train.out;
  ASSERT_EQ(r.report.code, 1) << r.report.out;
  const json& e = r.doc["first_edge"];
  expectFields(e, {{"origin", "attention"},
                   {"phase", "bwd"},
                   {"step", 0},
                   {"backend", "cudnn"},
                   {"injected", false},
                   {"inputs_finite", true}});
  EXPECT_EQ(strings(e["nonfinite_outputs"]), std::vector<std::string>{"dQ"});
  EXPECT_GT(e["counts"]["dQ"]["nan"].get<int64_t>(), 0);
  EXPECT_TRUE(anyKernelContains(e["kernels"], "cudnn_generated_fort_native_sdpa_sm90_flash_bprop"))
      << e["kernels"].dump(1);
  EXPECT_EQ(r.doc["ranks"][0]["meta"]["host_syncs"], "0") << "the checks never synchronised the host";
  // The backward's Q, K, V, O and mask were not read again: their counts, finite, came from its
  // forward's check (probes/libtorch/forward_checks.h), and the edge above is still the backward's.
  EXPECT_NE(r.doc["ranks"][0]["meta"].value("backward_inherited", ""), "") << r.doc["ranks"][0]["meta"].dump(1);
  // The store knows the versions and the GPU, and the mask's fully masked row: enough to name the
  // public report of this bug without a replay.
  const json& meta = r.doc["ranks"][0]["meta"];
  EXPECT_NE(meta.value("gpu", "").find("(sm_"), std::string::npos) << meta.dump(1);
  EXPECT_FALSE(meta.value("cudnn", "").empty()) << meta.dump(1);
  EXPECT_TRUE(names(r.doc["known_issues"], "pytorch#196678"))
      << r.doc["known_issues"].dump(1) << r.doc["possible_known_issues"].dump(1);
}

TEST(Gpu, ControlRunWithoutCudnnIsClean) {
  REQUIRE_CUDA();
  // --trace-steps 0: every call of every step is traced.
  TrainedRun r = train("gpu-control", "--trace-steps 0", kMaskedRowsRun + " --no-cudnn");
  ASSERT_EQ(r.train.code, runCodeForCleanExit(r)) << r.train.out;
  EXPECT_EQ(r.report.code, 0) << r.report.out;
  json calls = commandJson("kernels", r.dir);
  ASSERT_FALSE(calls.empty());
  for (const json& c : calls) {
    EXPECT_NE(c["backend"], "cudnn");
    EXPECT_EQ(c["attribution"], "CUPTI") << c.dump(1);
    EXPECT_FALSE(c["kernels"].empty()) << c["call"];
  }
}

// MATH attention on CUDA past the kernel-trace window (steps 0-1), where the probe no longer asks
// SDPA for its backend before the call: a MATH call is found and named after it ran. This guards
// the answer on that path (its overflow at step 3 is the first edge, with the MATH op and the
// trace window's reason), not that the question was skipped.
TEST(Gpu, MathCallsPastTheTraceWindowAreNamedAfterTheyRan) {
  REQUIRE_CUDA();
  TrainedRun r = train("gpu-math-late", "", "--device cuda --math --steps 5 --glitch-step 3 --glitch-scale 1e20");
  ASSERT_EQ(r.report.code, 1) << r.train.out;
  const json& e = r.doc["first_edge"];
  expectFields(e, {{"name", "rank0:layer0:call6"},
                   {"step", 3},
                   {"phase", "fwd"},
                   {"origin", "attention"},
                   {"op", "aten::_scaled_dot_product_attention_math"},
                   {"inputs_finite", true}});
  EXPECT_NE(e["unattributed"].dump().find("--trace-steps"), std::string::npos) << e.dump(1);
  EXPECT_EQ(r.doc["ranks"][0]["meta"]["host_syncs"], "0");
}

TEST(Gpu, EveryCallOfTheCudnnRunHasItsKernels) {
  REQUIRE_CUDA();
  // Tracing covers step 0 only; steps 1 and 2 show the kernels of the same call site at step 0.
  TrainedRun r = train("gpu-attrib", "--trace-steps 1", kMaskedRowsRun);
  json calls = commandJson("kernels", r.dir);
  ASSERT_FALSE(calls.empty());
  for (const json& c : calls) {
    if (c["step"] == 0) {
      ASSERT_EQ(c["attribution"], "CUPTI") << c.dump(1);
    } else {
      ASSERT_FALSE(c["inferred_from"].is_null()) << c.dump(1);
      EXPECT_NE(c["attribution"].get<std::string>().find("--trace-steps"), std::string::npos) << c.dump(1);
    }
    std::string want = c["phase"] == "fwd" ? "sdpa_sm90_flash_fprop" : "sdpa_sm90_flash_bprop";
    EXPECT_TRUE(anyKernelContains(c["kernels"], want)) << c["call"] << " " << c["kernels"].dump(1);
    EXPECT_FALSE(anyKernelContains(c["kernels"], "healthCheckKernel")) << "nanprov's own check is not the call's";
  }
}

TEST(Gpu, LossesAreBitIdenticalWithAndWithoutNanprov) {
  REQUIRE_CUDA();
  std::string args = " " + example("tiny_transformer.py") + " --device cuda --dtype bfloat16 --seq 64 --d-model 128 " +
                     "--mask --steps 5 --print-losses --no-cudnn";
  Result plain1 = sh(python() + args);
  Result plain2 = sh(python() + args);
  ASSERT_EQ(plain1.code, 0) << plain1.out;
  if (plain1.out != plain2.out) GTEST_SKIP() << "this training is not deterministic even without nanprov";
  Result probed =
      sh(nanprov() + " run --out " + runDir("gpu-identical").string() + " --" + " " + python() + args + " 2>/dev/null");
  ASSERT_EQ(probed.code, 0) << probed.out;
  EXPECT_NE(probed.out.find(plain1.out), std::string::npos) << "plain:\n" << plain1.out << "probed:\n" << probed.out;
}

// The gradient sentinel on CUDA: gradients and parameters read by the dense check kernel, their
// counts collected at later step boundaries, and still no host synchronisation.
TEST(Gpu, GradientSentinelNamesANaNMadeOutsideAttention) {
  REQUIRE_CUDA();
  TrainedRun r = train("gpu-sentinel", "",
                       "--device cuda --dtype bfloat16 --seq 64 --d-model 128 --no-cudnn "
                       "--steps 5 --regulariser-nan-step 2");
  expectSentinelNamesTheRegulariser(r);
  const json& meta = r.doc["ranks"][0]["meta"];
  EXPECT_EQ(meta["host_syncs"], "0") << "the sentinel never synchronised the host";
  // Every gradient and parameter is dense: all read by dense checks, none by the fused kernel.
  const std::string launches = meta.value("measure_launches", "");
  EXPECT_TRUE(launches.ends_with(", fused 0")) << launches;
  EXPECT_TRUE(launches.starts_with("dense ") && !launches.starts_with("dense 0,")) << launches;
}

// FSDP2 on one GPU (NCCL): the sentinel reads the local shards of the DTensor parameters and their
// gradients through the device checks, with no host synchronisation, and names them by their FQNs.
TEST(Gpu, GradientSentinelChecksFsdp2ShardsOnTheDevice) {
  REQUIRE_CUDA();
  fs::path dir = runDir("gpu-fsdp2");
  std::string torchrun = fs::path(python()).parent_path().string() + "/torchrun";
  // --no-capture: copying the edge out for a capture is not the sentinel's work.
  Result t = sh(nanprov() + " run --out " + dir.string() + " --no-capture -- " + torchrun +
                " --standalone --nproc-per-node=1 " + example("tiny_transformer.py") +
                " --device cuda --fsdp2 --steps 4 --glitch-step 2 2>&1");
  ASSERT_EQ(t.code, 1) << t.out;
  json doc = commandJson("report", dir);
  const json& s = doc["gradient_sentinel"];
  ASSERT_TRUE(s.is_object()) << doc.dump(1);
  EXPECT_EQ(s["step"], 2);
  const json& grads = s["gradients"];
  EXPECT_NE(std::find(grads.begin(), grads.end(), json("layers.0.attn.q_proj.weight")), grads.end()) << s.dump();
  EXPECT_EQ(doc["ranks"][0]["meta"]["host_syncs"], "0") << "the sentinel never synchronised the host";
}

TEST(Gpu, UnderTorchProfilerTheRunCompletesAndKernelsSayWhy) {
  REQUIRE_CUDA();
  TrainedRun r = train("gpu-profiler", "", kMaskedRowsRun + " --no-cudnn --profile");
  ASSERT_EQ(r.train.code, runCodeForCleanExit(r)) << r.train.out;
  EXPECT_NE(r.train.out.find("profiler events"), std::string::npos) << "the user's profile still works\n"
                                                                    << r.train.out;
  json calls = commandJson("kernels", r.dir);
  ASSERT_FALSE(calls.empty());
  for (const json& c : calls) {
    EXPECT_TRUE(c["kernels"].empty());
    EXPECT_NE(c["attribution"].get<std::string>().find("torch.profiler"), std::string::npos) << c.dump(1);
  }
}

json replayJson(const std::string& args, Result* result) {
  *result = sh(nanprov() + " replay " + args + " --json");
  return json::parse(result->out, nullptr, false);
}

TEST(Gpu, CudnnDqNaNIsCapturedAndReplaysAsBackendSpecific) {
  REQUIRE_CUDA();
  TrainedRun r = train("gpu-replay", "", kMaskedRowsRun);
  ASSERT_EQ(r.report.code, 1) << r.train.out;
  const json& e = r.doc["first_edge"];
  ASSERT_TRUE(e["capture"].is_string()) << e.dump(1);
  fs::path repro = r.dir / "repro";
  Result rp;
  json d = replayJson(e["capture"].get<std::string>() + " --emit-repro " + repro.string(), &rp);
  ASSERT_EQ(rp.code, 1) << rp.out;
  EXPECT_EQ(d["replayed_on"], "cuda:0");
  EXPECT_EQ(d["reference"]["device"], "cuda:0");
  EXPECT_EQ(d["root_cause"]["class"], "backend-specific") << d["root_cause"].dump(1);
  EXPECT_EQ(d["root_cause"]["backend"], "cudnn");
  EXPECT_EQ(d["root_cause"]["tensors"], json::array({"dQ"}));
  EXPECT_NE(d["root_cause"]["kernel"].get<std::string>().find("flash_bprop"), std::string::npos)
      << d["root_cause"].dump(1);
  EXPECT_EQ(d["captured"]["tensors"]["dQ"]["verdict"], "non-finite");
  // Issue 64: a deterministic kernel fault: every rerun of cuDNN on the captured inputs gives the
  // run's NaN. The backward is rerun by replay, not in the run.
  const json& reruns = d["reruns"];
  EXPECT_EQ(reruns["backend"], "cudnn") << reruns.dump(1);
  EXPECT_EQ(reruns["runs"], 5) << reruns.dump(1);
  EXPECT_EQ(reruns["reproduced"], 5) << reruns.dump(1);
  EXPECT_GE(reruns["distinct_results"], 1) << reruns.dump(1);  // dQ's atomics may vary its bits
  EXPECT_EQ(reruns["in_run_not_rerun"], "a backward is rerun by nanprov replay from its capture, not in the run")
      << reruns.dump(1);
  for (const json& b : d["backends"]) {
    if (b["name"] == "efficient" || b["name"] == "math") {
      ASSERT_EQ(b["status"], "ran") << b.dump(1);
      for (const auto& [role, t] : b["tensors"].items()) EXPECT_EQ(t["verdict"], "ok") << b["name"] << " " << role;
    }
  }
  const json& c = d["conditions"];
  EXPECT_TRUE(c["fully_masked_rows"].get<int64_t>() > 0 || c["lse_below_-88.7"].get<bool>()) << c.dump(1);
  EXPECT_EQ(c["s_kv_mod_128"], 64);
  EXPECT_TRUE(names(d["known_issues"], "pytorch#196678")) << d["known_issues"].dump(1);
  Result script = sh(python() + " " + (repro / "repro.py").string() + " 2>&1");
  EXPECT_EQ(script.code, 1) << script.out;
  EXPECT_NE(script.out.find("REPRODUCED"), std::string::npos) << script.out;
}

// The same cuDNN dQ bug at step 3, after the default 2-step trace window: nanprov run replays the
// edge's capture to name its kernel, and the report and replay both name the cuDNN bprop kernel.
TEST(Gpu, LateCudnnEdgeNamesItsKernelThroughAReplayOfItsCapture) {
  REQUIRE_CUDA();
  TrainedRun r = train("gpu-late", "",
                       "--device cuda --dtype bfloat16 --seq 64 --d-model 256 --heads 2 --mask-rows-from 3 --steps 5");
  ASSERT_EQ(r.report.code, 1) << r.train.out;
  const json& e = r.doc["first_edge"];
  EXPECT_EQ(e["step"], 3) << e.dump(1);
  EXPECT_EQ(e["phase"], "bwd");
  EXPECT_EQ(e["backend"], "cudnn");
  EXPECT_EQ(e["kernels_from"], "replay") << e.dump(1);
  EXPECT_TRUE(anyKernelContains(e["kernels"], "cudnn_generated_fort_native_sdpa_sm90_flash_bprop"))
      << e["kernels"].dump(1);
  EXPECT_NE(r.train.out.find("traced in a replay of its capture"), std::string::npos) << r.train.out;
  ASSERT_TRUE(e["capture"].is_string()) << e.dump(1);
  Result rp;
  json d = replayJson(e["capture"].get<std::string>(), &rp);
  ASSERT_EQ(rp.code, 1) << rp.out;
  EXPECT_EQ(d["kernels_from"], "replay") << d.dump(1);
  EXPECT_NE(d["root_cause"]["kernel"].get<std::string>().find("sdpa_sm90_flash_bprop"), std::string::npos)
      << d["root_cause"].dump(1);
  for (const json& b : d["backends"]) {
    if (b["status"] != "ran" || b["name"] == "math") continue;
    EXPECT_FALSE(b["kernels"].empty()) << b["name"] << " ran with no kernel traced";
  }
}

// cudnn-frontend#1072: one query row (decoder cross-attention to a memory of 128 keys sharing a
// large component), head_dim 64, bf16, no mask: cuDNN's backward writes NaN into all of dK and dV,
// dQ and O stay finite. The report names the call and, since causality and the row LSE are facts
// only a replay has, a possible match; the replay decides it.
TEST(Gpu, CudnnOneQueryBackwardNaNsDkDvAndReplayNamesItsReport) {
  REQUIRE_CUDA();
  TrainedRun r = train("gpu-one-query", "", "--device cuda --dtype bfloat16 --steps 2", "cross_attention_decoder.py");
  ASSERT_EQ(r.report.code, 1) << r.train.out;
  const json& e = r.doc["first_edge"];
  expectFields(e,
               {{"origin", "attention"}, {"phase", "bwd"}, {"step", 0}, {"backend", "cudnn"}, {"inputs_finite", true}});
  EXPECT_EQ(strings(e["nonfinite_outputs"]), (std::vector<std::string>{"dK", "dV"})) << e.dump(1);
  // The store cannot know causality or the row LSE: only possible, and those two undecided.
  EXPECT_FALSE(names(r.doc["known_issues"], "cudnn-frontend#1072")) << r.doc["known_issues"].dump(1);
  bool possible = false;
  for (const json& k : r.doc["possible_known_issues"]) {
    if (k["id"] != "cudnn-frontend#1072") continue;
    possible = true;
    EXPECT_EQ(strings(k["undecided"]), (std::vector<std::string>{"causal", "row_lse_below"})) << k.dump();
  }
  EXPECT_TRUE(possible) << r.doc["possible_known_issues"].dump(1);
  ASSERT_TRUE(e["capture"].is_string()) << e.dump(1);
  Result rp;
  json d = replayJson(e["capture"].get<std::string>(), &rp);
  EXPECT_EQ(rp.code, 1) << rp.out;
  EXPECT_EQ(d["root_cause"]["class"], "backend-specific") << d["root_cause"].dump(1);
  EXPECT_EQ(d["conditions"]["s_q"], 1) << d["conditions"].dump(1);
  EXPECT_TRUE(names(d["known_issues"], "cudnn-frontend#1072")) << d["known_issues"].dump(1) << d["conditions"].dump(1);
  Result control =
      sh(nanprov() + " run --out " + runDir("gpu-two-queries").string() + " -- " + python() + " " +
         example("cross_attention_decoder.py") + " --device cuda --dtype bfloat16 --steps 2 --queries 2 2>&1");
  EXPECT_EQ(control.code, 0) << "s_q = 2 is clean\n" << control.out;
}

// No false alarms: clean bf16 calls at head_dim 256 and 512 replay as ok on every backend that runs them.
TEST(Gpu, CleanBf16CallsAtHeadDim256And512ReplayOk) {
  REQUIRE_CUDA();
  for (const char* d_model : {"512", "1024"}) {
    TrainedRun r =
        train(std::string("gpu-clean-") + d_model, "--capture 'layer=0,step=0'",
              std::string("--device cuda --dtype bfloat16 --seq 128 --heads 2 --steps 1 --d-model ") + d_model);
    ASSERT_EQ(r.report.code, 0) << r.train.out;
    json rows = json::parse(sh(nanprov() + " sql " + r.dir.string() + " \"SELECT path FROM captures\" --json").out);
    ASSERT_EQ(rows.size(), 2u) << "the forward and the backward of layer 0";
    for (const json& row : rows) {
      Result rp;
      json d = replayJson((r.dir / row["path"].get<std::string>()).string(), &rp);
      EXPECT_EQ(rp.code, 0) << rp.out;
      EXPECT_EQ(d["root_cause"]["class"], "none") << d.dump(1);
      int ran = 0;
      for (const json& b : d["backends"]) {
        if (b["status"] != "ran") continue;
        ++ran;
        for (const auto& [role, t] : b["tensors"].items())
          EXPECT_EQ(t["verdict"], "ok") << d_model << " " << b["name"] << " " << role;
      }
      EXPECT_GE(ran, 2) << d.dump(1);
    }
  }
}

// Seed 001's shape on the GPU: a Gemma4-like model, full-attention layers at head_dim 512 (GQA) through
// FFPA's Triton kernels, sliding-window layers through FlexAttention. The overflow in layer 3 at step 2
// is FFPA's forward, checked by default; FFPA's backward calls are checked too. Needs ffpa-attn on
// PYTHONPATH (scripts/device-ffpa.sh); skips where it does not import.
TEST(Gpu, FfpaOverflowAtHeadDim512IsFoundAtItsStepAndLayer) {
  REQUIRE_CUDA();
  if (sh(python() + " -c 'import ffpa_attn' 2>/dev/null").code != 0) {
    GTEST_SKIP() << "ffpa_attn does not import here: scripts/device-ffpa.sh puts it on PYTHONPATH";
  }
  TrainedRun r =
      train("gpu-ffpa", "", "--device cuda --sliding flex --layers 4 --steps 3 --overflow-layer 3 --overflow-step 2",
            "gemma4_ffpa.py");
  ASSERT_EQ(r.report.code, 1) << r.train.out;
  expectFields(r.doc["first_edge"], {{"step", 2},
                                     {"layer", 3},
                                     {"phase", "fwd"},
                                     {"module", "layers.3.self_attn"},
                                     {"op", "ffpa_attn_func"},
                                     {"backend", "ffpa"}});
  std::set<std::string> phases;
  for (const json& c : commandJson("calls", r.dir, "--backend ffpa")) {
    EXPECT_TRUE(c["layer"] == 1 || c["layer"] == 3) << c.dump();
    phases.insert(c["phase"].get<std::string>());
  }
  EXPECT_EQ(phases, (std::set<std::string>{"fwd", "bwd"}));
  Result rp;
  json d = replayJson(r.dir.string(), &rp);
  EXPECT_EQ(d["root_cause"]["class"], "precision-limit") << d.dump(1);
}

}  // namespace

// Attention inside CUDA graphs is checked at every replay (probes/libtorch/graph_checks.h): the
// glitch at step 4 overflows layer 0's attention logits inside a graph replay, under
// torch.compile(mode="reduce-overhead") (cudagraph trees) and under make_graphed_callables. The
// ground truth is the training's own losses: finite up to step 3, NaN from step 4.
class GraphedTraining : public testing::TestWithParam<const char*> {};

TEST_P(GraphedTraining, AnOverflowInsideACudaGraphIsFoundAtItsStepAndLayer) {
  REQUIRE_CUDA();
  const std::string args = std::string("--device cuda --dtype bfloat16 --seq 64 --d-model 256 --heads 2 --steps 7 ") +
                           "--glitch-step 4 --print-losses " + GetParam();
  Result plain = sh(python() + " " + example("tiny_transformer.py") + " " + args + " 2>/dev/null");
  ASSERT_EQ(plain.code, 0) << plain.out;
  ASSERT_NE(plain.out.find("rank0 step3 loss 0x"), std::string::npos) << plain.out;
  ASSERT_NE(plain.out.find("rank0 step4 loss nan"), std::string::npos) << "the glitch makes step 4 NaN: " << plain.out;
  const std::string name =
      std::string("gpu-graphed-") +
      (std::string(GetParam()).find("compile") != std::string::npos ? "reduce-overhead" : "callables");
  TrainedRun r = train(name, "", args);
  ASSERT_EQ(r.train.code, runCodeForCleanExit(r)) << r.train.out;
  ASSERT_EQ(r.report.code, 1) << r.report.out;
  expectFields(r.doc["first_edge"], {{"origin", "attention"},
                                     {"phase", "fwd"},
                                     {"step", 4},
                                     {"layer", 0},
                                     {"inputs_finite", true},
                                     {"injected", false}});
  EXPECT_TRUE(r.doc["coverage"]["unprobed"].empty()) << r.report.out;
  EXPECT_EQ(r.doc["ranks"][0]["meta"]["host_syncs"], "0") << "graph checks are read from mapped memory";
  // Every step's calls are recorded, the replayed ones included: both layers, both phases.
  json calls = commandJson("calls", r.dir, "--step 3");
  EXPECT_EQ(calls.size(), 4u) << calls.dump(1);
  // The training is the same with nanprov: its losses, printed as exact hex floats, are the plain run's.
  std::string losses;
  for (size_t at = r.train.out.find("rank0 step"); at != std::string::npos;
       at = r.train.out.find("rank0 step", at + 1)) {
    losses += r.train.out.substr(at, r.train.out.find('\n', at) - at + 1);
  }
  EXPECT_EQ(losses, plain.out);
}

INSTANTIATE_TEST_SUITE_P(Gpu, GraphedTraining, testing::Values("--compile reduce-overhead", "--graphed"));
