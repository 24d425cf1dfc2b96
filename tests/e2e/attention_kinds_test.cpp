// End-to-end: attention that is not PyTorch's SDPA entry point, in real CPU runs under `nanprov
// run`: PyTorch's fast paths and FlexAttention. Each is found at the right forward pass and layer,
// its clean twin is clean with every call counted, and its capture replays.
#include <gtest/gtest.h>

#include <set>

#include "tests/e2e/e2e_support.h"

namespace {
using namespace e2e;

// PyTorch's fast path: nn.TransformerEncoder in eval() under no_grad runs each layer as one op,
// whose attention is aten::_native_multi_head_attention. Checked, named by forward pass and layer.
TEST(AttentionKinds, FastPathEncoderIsCheckedAndItsCleanRunIsClean) {
  // Compiled, Inductor calls the fast-path op as an extern kernel: named from the graph's module stack.
  for (std::string mode : {"", "--compile"}) {
    SCOPED_TRACE(mode);
    ColdInductorCache cold("fast-path" + mode);
    TrainedRun r = train("fast-path", "", mode, "fast_path_encoder.py");
    ASSERT_EQ(r.train.code, runCodeForCleanExit(r)) << r.train.out;
    EXPECT_EQ(r.report.code, 0) << r.report.out;
    EXPECT_EQ(r.doc["outcome"], "clean");
    EXPECT_EQ(r.doc["step_unit"], "forward_pass");
    EXPECT_EQ(r.doc["coverage"]["attention_calls"], 6) << "2 layers x 3 forward passes";
    EXPECT_TRUE(r.doc["coverage"]["unprobed"].empty()) << r.report.out;
    std::set<std::string> modules, backends;
    std::set<int64_t> layers;
    for (const json& c : commandJson("calls", r.dir)) {
      modules.insert(c["module"].get<std::string>());
      backends.insert(c["backend"].get<std::string>());
      layers.insert(c["layer"].get<int64_t>());
    }
    EXPECT_EQ(modules, (std::set<std::string>{"layers.0", "layers.1"}));
    EXPECT_EQ(layers, (std::set<int64_t>{0, 1}));
    EXPECT_EQ(backends, (std::set<std::string>{"native_mha"}));
  }
}

TEST(AttentionKinds, FastPathEncoderGlitchIsFoundAtItsForwardPassAndReplays) {
  for (std::string padding : {"", " --padding"}) {
    SCOPED_TRACE(padding);
    TrainedRun r = train("fast-path-glitch", "", "--glitch-pass 1" + padding, "fast_path_encoder.py");
    ASSERT_EQ(r.report.code, 1) << r.train.out;
    const json& e = r.doc["first_edge"];
    EXPECT_EQ(r.doc["step_unit"], "forward_pass");
    expectFields(e, {{"step", 1},
                     {"layer", 0},
                     {"module", "layers.0"},
                     {"origin", "attention"},
                     {"op", "aten::_native_multi_head_attention"}});
    // Replay projects the captured inputs with the captured weights: every backend overflows
    // float32 alike while the float64 reference is finite.
    Result replay = sh(nanprov() + " replay " + r.dir.string() + " --json");
    json d = json::parse(replay.out, nullptr, false);
    ASSERT_FALSE(d.is_discarded()) << replay.out;
    EXPECT_EQ(replay.code, 1) << replay.out;
    EXPECT_EQ(d["root_cause"]["class"], "precision-limit") << replay.out;
    EXPECT_FALSE(d["note"].is_null());
  }
}

// FlexAttention runs as a higher-order op; the bootstrap records each eager call after it ran,
// with the bias its score_mod applied materialised for replay.
TEST(AttentionKinds, FlexAttentionCleanRunIsClean) {
  TrainedRun r = train("flex", "", "", "flex_attention.py");
  ASSERT_EQ(r.train.code, runCodeForCleanExit(r)) << r.train.out;
  EXPECT_EQ(r.report.code, 0) << r.report.out;
  EXPECT_EQ(r.doc["outcome"], "clean");
  EXPECT_EQ(r.doc["coverage"]["attention_calls"], 6) << "3 layers x 2 forward passes";
  EXPECT_TRUE(r.doc["coverage"]["unprobed"].empty()) << r.report.out;
  EXPECT_EQ(r.train.out.find("probe failed"), std::string::npos) << r.train.out;
  std::set<std::string> modules;
  for (const json& c : commandJson("calls", r.dir)) {
    EXPECT_EQ(c["backend"], "flex");
    modules.insert(c["module"].get<std::string>());
  }
  EXPECT_EQ(modules, (std::set<std::string>{"layers.0", "layers.1", "layers.2"}));
}

TEST(AttentionKinds, FlexAttentionNaNScoreModIsFoundAtItsLayerAndReplays) {
  TrainedRun r = train("flex-bad", "", "--bad-layer 1", "flex_attention.py");
  ASSERT_EQ(r.report.code, 1) << r.train.out;
  const json& e = r.doc["first_edge"];
  EXPECT_EQ(r.doc["step_unit"], "forward_pass");
  expectFields(e, {{"step", 0}, {"layer", 1}, {"module", "layers.1"}, {"op", "flex_attention"}});
  EXPECT_EQ(e["origin"], "attention") << "the score_mod is part of the call";
  // The bias replayed is the score_mod's: it holds the NaN, so the reference fails too.
  Result replay = sh(nanprov() + " replay " + r.dir.string() + " --json");
  json d = json::parse(replay.out, nullptr, false);
  ASSERT_FALSE(d.is_discarded()) << replay.out;
  EXPECT_EQ(d["root_cause"]["class"], "input-caused") << replay.out;
  EXPECT_NE(d["note"].get<std::string>().find("score_mod"), std::string::npos) << d["note"];
}

// Which flex kernel ran (kernel_options["BACKEND"]) decides known bugs (FA4's FLASH backend drops
// seqlen in block-sparse loads, flash-attention#2563): the capture keeps it for replay's matcher.
// A call that did not say gets torch's default, AUTO, filled in before the op runs.
TEST(AttentionKinds, FlexAttentionKernelBackendIsKeptInItsCapture) {
  for (const std::string backend : {"TRITON", ""}) {
    SCOPED_TRACE("BACKEND " + backend);
    TrainedRun r =
        train("flex-backend" + backend, "", "--bad-layer 1 --kernel-backend '" + backend + "'", "flex_attention.py");
    ASSERT_EQ(r.report.code, 1) << r.train.out;
    std::vector<fs::path> captures;
    for (const auto& entry : fs::directory_iterator(r.dir / "captures")) captures.push_back(entry.path());
    ASSERT_FALSE(captures.empty()) << r.report.out;
    for (const fs::path& capture : captures) {
      Result meta = sh(python() +
                       " -c \"import json, struct, sys; f = open(sys.argv[1], 'rb'); "
                       "n = struct.unpack('<Q', f.read(8))[0]; "
                       "print(json.loads(f.read(n))['__metadata__'].get('arg.kernel_backend', '-'))\" " +
                       capture.string());
      EXPECT_EQ(meta.out, (backend.empty() ? "AUTO" : backend) + "\n") << capture;
    }
  }
}

// The probes only read: the model's outputs are bit-identical with and without nanprov (the bias
// is materialised with a generator of nanprov's own, never the global one).
TEST(AttentionKinds, FlexAndFastPathOutputsAreBitIdentical) {
  for (std::string script : {"flex_attention.py --print-outputs", "fast_path_encoder.py --print-outputs"}) {
    SCOPED_TRACE(script);
    Result plain = sh(python() + " " + example(script) + " 2>/dev/null");
    Result probed = sh(nanprov() + " run --out " + runDir("identical-kinds").string() + " -- " + python() + " " +
                       example(script) + " 2>/dev/null");
    ASSERT_EQ(plain.code, 0);
    EXPECT_NE(plain.out.find("0x"), std::string::npos) << plain.out;
    EXPECT_EQ(plain.out, probed.out);
  }
}

// Hand-written attention (softmax(q k^T) v in the model's own module) is checked by default, as
// one call with its real roles (op softmax_attention, backend plain_softmax): found at its step and
// layer, replayed, losses untouched. Under --probe-module the module's bracket yields to that call,
// which has the real Q, K and V, and nothing is recorded twice.
TEST(AttentionKinds, HandWrittenAttentionCheckedByDefault) {
  for (std::string opts : {"", "--probe-module HandAttention"}) {
    SCOPED_TRACE(opts);
    TrainedRun r = train("hand", opts, "--glitch-step 2", "handwritten_attention.py");
    ASSERT_EQ(r.report.code, 1) << r.train.out;
    const json& e = r.doc["first_edge"];
    expectFields(e, {{"step", 2},
                     {"layer", 0},
                     {"module", "layers.0.attn"},
                     {"op", "softmax_attention"},
                     {"backend", "plain_softmax"},
                     {"origin", "attention"}});
    EXPECT_EQ(r.doc["outcome"], "edge") << r.report.out;
    EXPECT_EQ(r.doc["coverage"]["attention_calls"], 16) << "2 layers x 4 steps, forward and backward, once each";
    Result replay = sh(nanprov() + " replay " + r.dir.string() + " --json");
    EXPECT_EQ(replay.code, 1) << replay.out;
    EXPECT_NE(replay.out.find("precision-limit"), std::string::npos) << replay.out;
  }
}

// Its backward, from tensor hooks on O and the matmuls' operands, is checked and linked to the
// forward; a --probe-module that matches nothing says so.
TEST(AttentionKinds, HandWrittenAttentionBackwardAndLosses) {
  TrainedRun bwd = train("hand-bwd", "--inject 'layer=1,phase=bwd,tensor=dQ,step=1'", "", "handwritten_attention.py");
  ASSERT_EQ(bwd.report.code, 1) << bwd.train.out;
  EXPECT_EQ(bwd.doc["first_edge"]["phase"], "bwd");
  EXPECT_EQ(bwd.doc["first_edge"]["step"], 1);
  EXPECT_EQ(bwd.doc["first_edge"]["layer"], 1);
  EXPECT_EQ(bwd.doc["first_edge"]["module"], "layers.1.attn");
  EXPECT_EQ(strings(bwd.doc["first_edge"]["nonfinite_outputs"]), std::vector<std::string>{"dQ"});
  EXPECT_EQ(commandJson("calls", bwd.dir, "--phase bwd --step 0").size(), 2u) << "one backward per layer";

  // A --probe-module that matches nothing says so; the hand-written attention is checked anyway.
  TrainedRun nothing = train("hand-nope", "--probe-module 'layers.*.nope'", "", "handwritten_attention.py");
  EXPECT_EQ(nothing.report.code, 0) << nothing.report.out;
  EXPECT_NE(nothing.train.out.find("--probe-module 'layers.*.nope' matched no module"), std::string::npos)
      << nothing.train.out;
}

// The probes and the module hooks only read, eager or compiled (where they stand aside while Dynamo traces).
TEST(AttentionKinds, HandWrittenAttentionLossesAreBitIdentical) {
  for (std::string mode : {"", " --compile"}) {
    SCOPED_TRACE(mode);
    std::string args = example("handwritten_attention.py") + " --print-losses" + mode;
    Result plain, probed;
    {
      ColdInductorCache cold("hand-plain");
      plain = sh(python() + " " + args + " 2>/dev/null");
    }
    {
      ColdInductorCache cold("hand-probed");
      probed = sh(nanprov() + " run --out " + runDir("hand-identical").string() +
                  " --probe-module 'layers.*.attn' -- " + python() + " " + args + " 2>/dev/null");
    }
    EXPECT_EQ(probed.code, 0);
    EXPECT_NE(plain.out.find("step 3: loss 0x"), std::string::npos) << plain.out;
    EXPECT_EQ(plain.out, probed.out);
  }
}

// The TransformerEngine preset, through the generic path: TE cannot be installed here, so a module
// of DotProductAttention's class name and call signature stands in, called with keywords.
TEST(AttentionKinds, TransformerEnginePresetFindsDotProductAttentionByKeyword) {
  fs::path dir = runDir("te");
  Result run = sh(nanprov() + " run --out " + dir.string() + " --probe-module te -- " + python() + " " +
                  std::string(NANPROV_TEST_SCRIPTS) + "/te_signature_attention.py --glitch-step 1 2>&1");
  ASSERT_EQ(run.code, 1) << "the script exits 0; nanprov found the edge: " << run.out;
  EXPECT_EQ(run.out.find("did not give tensors"), std::string::npos) << run.out;
  json report = commandJson("report", dir);
  EXPECT_EQ(report["first_edge"]["step"], 1) << report.dump();
  expectFields(report["first_edge"],
               {{"layer", 0}, {"module", "layers.0.core_attention"}, {"op", "module:DotProductAttention"}});
  EXPECT_EQ(report["coverage"]["attention_calls"], 12) << "2 layers x 3 steps, forward and backward";
}

}  // namespace
