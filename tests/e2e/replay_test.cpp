// End-to-end: capture in real CPU training under `nanprov run`, then `nanprov replay`, judged by
// its JSON. Nothing is mocked: the captures are the run's, the verdicts the replay engine's.
#include <gtest/gtest.h>

#include <fstream>
#include <tuple>

#include "tests/e2e/e2e_support.h"

namespace {
using namespace e2e;

// `nanprov replay <args> --json`, parsed, with its exit code.
struct Replay {
  Result result;
  json doc;
};

Replay replay(const std::string& args) {
  Replay r;
  r.result = sh(nanprov() + " replay " + args + " --json");
  r.doc = json::parse(r.result.out, nullptr, false);
  return r;
}

const json& backend(const json& doc, const std::string& name) {
  for (const json& b : doc["backends"]) {
    if (b["name"] == name) return b;
  }
  static const json none;
  return none;
}

TEST(Replay, DemoOverflowEdgeIsCapturedAndReplaysAsPrecisionLimit) {
  TrainedRun r = train("replay-overflow", "", "--steps 4 --glitch-step 2 --glitch-scale 1e20");
  ASSERT_EQ(r.report.code, 1) << r.train.out;
  const json& e = r.doc["first_edge"];
  ASSERT_TRUE(e["capture"].is_string()) << e.dump(1);
  std::string capture = e["capture"];
  ASSERT_TRUE(fs::exists(capture));
  EXPECT_NE(r.train.out.find("captured: nanprov replay " + capture), std::string::npos) << r.train.out;

  // The safetensors package opens what the probes wrote.
  Result py = sh(python() + " -c \"from safetensors import safe_open; f = safe_open('" + capture +
                 "', 'pt'); m = f.metadata(); print(sorted(f.keys()), m['op'], m['phase'], m['call'])\"");
  ASSERT_EQ(py.code, 0) << py.out;
  EXPECT_NE(py.out.find("['K', 'LSE', 'O', 'Q', 'V'] aten::_scaled_dot_product_flash_attention_for_cpu fwd "
                        "rank0:layer0:call4"),
            std::string::npos)
      << py.out;

  fs::path repro = r.dir / "repro";
  Replay rp = replay(capture + " --emit-repro " + repro.string());
  ASSERT_EQ(rp.result.code, 1) << rp.result.out << "\n(1: a fault recurred)";
  const json& d = rp.doc;
  EXPECT_EQ(d["root_cause"]["class"], "precision-limit") << d["root_cause"].dump(1);
  EXPECT_EQ(d["reference"]["valid"], true) << "the float64 reference stays finite";
  EXPECT_EQ(d["captured"]["tensors"]["O"]["verdict"], "non-finite");
  for (const char* name : {"flash_cpu", "math"}) {
    const json& b = backend(d, name);
    ASSERT_EQ(b["status"], "ran") << name;
    EXPECT_EQ(b["tensors"]["O"]["verdict"], "non-finite") << name;
    EXPECT_GT(b["tensors"]["O"]["nonfinite"].get<int64_t>(), 0) << name;
  }
  EXPECT_EQ(backend(d, "flash_cpu")["original"], true);
  EXPECT_NE(std::find(d["yardstick_nonfinite"].begin(), d["yardstick_nonfinite"].end(), "O"),
            d["yardstick_nonfinite"].end())
      << "the float32 yardstick overflows too";
  // The overflow is the kernel's deterministic answer to these inputs: every rerun of the captured
  // backend gives it, bit for bit as the run did.
  const json& reruns = d["reruns"];
  EXPECT_EQ(reruns["backend"], "flash_cpu") << reruns.dump(1);
  EXPECT_EQ(reruns["device"], "cpu");
  EXPECT_EQ(reruns["runs"], 5) << "the default";
  EXPECT_EQ(reruns["reproduced"], 5) << reruns.dump(1);
  EXPECT_EQ(reruns["distinct_results"], 1) << reruns.dump(1);
  EXPECT_EQ(reruns["identical_to_run"], 5) << "the run's own outputs, bit for bit: " << reruns.dump(1);
  EXPECT_TRUE(reruns["other_backends"].empty()) << "others are rerun only when the captured backend varies";

  // The emitted script shows the failure with plain PyTorch, without nanprov.
  Result script = sh("cd / && " + python() + " " + (repro / "repro.py").string() + " 2>&1");
  EXPECT_EQ(script.code, 1) << script.out;
  EXPECT_NE(script.out.find("REPRODUCED, a precision limit and not a kernel bug"), std::string::npos) << script.out;
  EXPECT_EQ(script.out.find("FLASH_ATTENTION gets"), std::string::npos) << "no backend is blamed: " << script.out;

  // Given the run directory, replay takes its first source edge's capture.
  Replay by_run = replay(r.dir.string());
  EXPECT_EQ(by_run.doc["capture"], capture);

  // --keep keeps the verdicts where report --html looks: X.replay.json beside X.safetensors.
  const fs::path kept = fs::path(capture).replace_extension(".replay.json");
  Result keep = sh(nanprov() + " replay " + capture + " --keep");
  EXPECT_EQ(keep.code, 1) << keep.out;
  EXPECT_NE(keep.out.find("kept the verdicts in " + kept.string()), std::string::npos) << keep.out;
  json kept_doc = json::parse(std::ifstream(kept), nullptr, false);
  ASSERT_FALSE(kept_doc.is_discarded()) << kept;
  EXPECT_EQ(kept_doc["root_cause"], d["root_cause"]);
}

TEST(Replay, CleanCallsCapturedBySelectorReplayOkOnEveryCpuBackend) {
  TrainedRun r = train("replay-clean", "--capture 'layer=0,phase=bwd,step=0' --capture 'layer=1,phase=fwd,step=1'",
                       "--steps 2 --mask-rows");
  ASSERT_EQ(r.report.code, 0) << r.train.out;
  json rows = json::parse(
      sh(nanprov() + " sql " + r.dir.string() + " \"SELECT trigger, path FROM captures ORDER BY seq\" --json").out);
  ASSERT_EQ(rows.size(), 2u) << rows.dump(1);
  for (const json& row : rows) {
    EXPECT_EQ(row["trigger"], "selector");
    Replay rp = replay((r.dir / row["path"].get<std::string>()).string());
    ASSERT_EQ(rp.result.code, 0) << rp.result.out;
    EXPECT_EQ(rp.doc["root_cause"]["class"], "none");
    EXPECT_GT(rp.doc["conditions"]["fully_masked_rows"].get<int64_t>(), 0) << "--mask-rows hides whole rows";
    bool bwd = rp.doc["phase"] == "bwd";
    for (const char* name : {"flash_cpu", "math"}) {
      const json& b = backend(rp.doc, name);
      ASSERT_EQ(b["status"], "ran") << name;
      for (const char* role : {"O", "dQ", "dK", "dV"}) {
        if (!bwd && role[0] == 'd') continue;
        EXPECT_EQ(b["tensors"][role]["verdict"], "ok") << name << " " << role << "\n" << b.dump(1);
      }
    }
    if (bwd) EXPECT_EQ(rp.doc["captured"]["tensors"]["dQ"]["verdict"], "ok");
  }
}

TEST(Replay, InjectedBackwardFaultIsNotReproduced) {
  TrainedRun r = train("replay-inject", "--inject 'layer=1,phase=bwd,tensor=dQ,step=1,value=nan'", "--steps 3");
  ASSERT_EQ(r.report.code, 1) << r.train.out;
  ASSERT_TRUE(r.doc["first_edge"]["capture"].is_string()) << r.doc["first_edge"].dump(1);
  Replay rp = replay(r.doc["first_edge"]["capture"].get<std::string>());
  EXPECT_EQ(rp.result.code, 0) << rp.result.out << "\n(0: the fault did not recur)";
  EXPECT_EQ(rp.doc["root_cause"]["class"], "not-reproduced");
  EXPECT_EQ(rp.doc["injected"], "dQ");
  EXPECT_NE(rp.doc["root_cause"]["explanation"].get<std::string>().find("--inject"), std::string::npos);
  EXPECT_EQ(rp.doc["captured"]["tensors"]["dQ"]["verdict"], "non-finite");
  EXPECT_EQ(backend(rp.doc, "flash_cpu")["tensors"]["dQ"]["verdict"], "ok");
  Result text = sh(nanprov() + " replay " + rp.doc["capture"].get<std::string>());
  EXPECT_NE(text.out.find("corrupted by nanprov run --inject, so the kernel itself is fine"), std::string::npos)
      << text.out;
  // An injected NaN never recurs, and the reruns agree bit for bit among themselves: the run's
  // result cannot be recomputed from its inputs.
  const json& reruns = rp.doc["reruns"];
  EXPECT_EQ(reruns["runs"], 5) << reruns.dump(1);
  EXPECT_EQ(reruns["reproduced"], 0) << reruns.dump(1);
  EXPECT_EQ(reruns["distinct_results"], 1) << reruns.dump(1);
  EXPECT_EQ(reruns["identical_to_run"], 0) << reruns.dump(1);
  EXPECT_NE(rp.doc["root_cause"]["explanation"].get<std::string>().find("5 reruns on cpu, each bitwise identical"),
            std::string::npos)
      << rp.doc["root_cause"].dump(1);
  EXPECT_NE(text.out.find("reruns: flash_cpu on cpu gave the run's result 0 of 5 times, one bitwise result (none "
                          "identical to the run's)"),
            std::string::npos)
      << text.out;
  // --reruns sets how often; 1 runs the backend once, as before.
  Replay three = replay(rp.doc["capture"].get<std::string>() + " --reruns 3");
  EXPECT_EQ(three.doc["reruns"]["runs"], 3) << three.result.out;
  Replay once = replay(rp.doc["capture"].get<std::string>() + " --reruns 1");
  EXPECT_EQ(once.doc["reruns"]["runs"], 1) << once.result.out;
  for (const char* bad : {"0", "-2", "abc", "1001"}) {
    Result r = sh(nanprov() + " replay " + rp.doc["capture"].get<std::string>() + " --reruns " + bad + " 2>&1");
    EXPECT_EQ(r.code, 2) << bad << ": " << r.out;
    EXPECT_NE(r.out.find("--reruns"), std::string::npos) << r.out;
  }
}

// Issue 64: a library's own op (flaky::attn, a --probe-op) that writes a NaN on every other call,
// as a kernel with a race would on about half its runs. Replay cannot run the op; the run's process
// reruns the first edge's call where it ran, 20 times, and finds the NaN in exactly 10 (the op's
// own rule is the ground truth): replay names it nondeterministic from those reruns.
TEST(Replay, AFlakyLibraryOpRerunInTheRunIsNondeterministic) {
  const fs::path dir = runDir("flaky-op");
  const std::string script = std::string(NANPROV_TEST_SCRIPTS) + "/flaky_library_op.py";
  Result run = sh(nanprov() + " run --out " + dir.string() + " --reruns 20 --probe-op 'flaky::attn:q=Q,k=K,v=V' -- " +
                  python() + " " + script + " --oracle 2>&1");
  ASSERT_EQ(run.code, 1) << run.out << "\n(1: the training exited 0 and nanprov found an edge)";
  EXPECT_NE(run.out.find("oracle: flaky::attn call 3 wrote a NaN"), std::string::npos) << run.out;
  json doc = json::parse(sh(nanprov() + " report " + dir.string() + " --json").out, nullptr, false);
  ASSERT_FALSE(doc.is_discarded());
  const json& e = doc["first_edge"];
  EXPECT_EQ(e["op"], "flaky::attn") << e.dump(1);
  EXPECT_EQ(e["inputs_finite"], true) << e.dump(1);
  ASSERT_TRUE(e["capture"].is_string()) << e.dump(1);
  Replay rp = replay(e["capture"].get<std::string>());
  EXPECT_EQ(rp.result.code, 1) << rp.result.out << "\n(1: the fault recurred, in some reruns)";
  const json& in_run = rp.doc["reruns"]["in_run"];
  ASSERT_TRUE(in_run.is_object()) << rp.doc["reruns"].dump(1);
  EXPECT_EQ(in_run["runs"], 20);
  EXPECT_EQ(in_run["reproduced"], 10) << "every other call of the op writes its NaN";
  EXPECT_EQ(in_run["distinct_results"], 2) << in_run.dump(1);
  EXPECT_EQ(rp.doc["root_cause"]["class"], "nondeterministic") << rp.doc["root_cause"].dump(1);
  EXPECT_NE(rp.doc["root_cause"]["explanation"].get<std::string>().find("10 of 20 reruns"), std::string::npos)
      << rp.doc["root_cause"].dump(1);
  EXPECT_EQ(rp.doc["reruns"]["not_rerun"], "replay has no backend of its own that runs it") << rp.doc["reruns"].dump(1);

  // Without --reruns the library's own code, which may keep state, is not run again: the training
  // computes what it would without nanprov, and replay says why it has no in-run reruns.
  const fs::path plain_dir = runDir("flaky-op-default");
  Result plain = sh(nanprov() + " run --out " + plain_dir.string() + " --probe-op 'flaky::attn:q=Q,k=K,v=V' -- " +
                    python() + " " + script + " 2>&1");
  ASSERT_EQ(plain.code, 1) << plain.out;
  json plain_doc = json::parse(sh(nanprov() + " report " + plain_dir.string() + " --json").out, nullptr, false);
  ASSERT_TRUE(plain_doc["first_edge"]["capture"].is_string()) << plain_doc.dump(1);
  Replay plain_rp = replay(plain_doc["first_edge"]["capture"].get<std::string>());
  EXPECT_EQ(plain_rp.doc["reruns"]["in_run_not_rerun"],
            "a --probe-op is the library's own code, which may keep state: nanprov run --reruns N reruns it")
      << plain_rp.doc["reruns"].dump(1);
}

// An injected NaN in a forward: the run's process and replay both rerun the call (the CPU flash
// kernel), never see the NaN, and every rerun gives the same bits: not reproduced, the injection
// named. The reruns change nothing the training computes: its losses are the plain run's.
TEST(Replay, AnInjectedForwardNaNIsNeverReproducedAndTheRerunsLeaveTheTrainingAlone) {
  const std::string args = example("tiny_transformer.py") + " --steps 3 --print-losses";
  TrainedRun r = train("rerun-inject", "--inject 'layer=0,phase=fwd,tensor=O,step=1,value=nan'", "--steps 3");
  ASSERT_EQ(r.report.code, 1) << r.train.out;
  ASSERT_TRUE(r.doc["first_edge"]["capture"].is_string()) << r.doc["first_edge"].dump(1);
  Replay rp = replay(r.doc["first_edge"]["capture"].get<std::string>());
  EXPECT_EQ(rp.result.code, 0) << rp.result.out;
  EXPECT_EQ(rp.doc["root_cause"]["class"], "not-reproduced") << rp.doc["root_cause"].dump(1);
  const json& in_run = rp.doc["reruns"]["in_run"];
  ASSERT_TRUE(in_run.is_object()) << rp.doc["reruns"].dump(1);
  EXPECT_EQ(in_run["runs"], 5) << "the default";
  EXPECT_EQ(in_run["reproduced"], 0);
  EXPECT_EQ(in_run["identical_to_run"], 0);
  EXPECT_EQ(in_run["distinct_results"], 1) << "every rerun computes the same bits";
  EXPECT_EQ(rp.doc["reruns"]["reproduced"], 0);

  // A real overflow edge in a forward is rerun in the run; the losses stay the plain run's.
  const std::string glitch = " --glitch-step 1 --glitch-scale 1e20";
  Result plain = sh(python() + " " + args + glitch + " 2>/dev/null");
  const fs::path losses_dir = runDir("rerun-losses");
  Result rerun =
      sh(nanprov() + " run --out " + losses_dir.string() + " -- " + python() + " " + args + glitch + " 2>/dev/null");
  EXPECT_NE(plain.out.find("step2 loss"), std::string::npos) << plain.out;
  EXPECT_EQ(plain.out, rerun.out);
  json doc = json::parse(sh(nanprov() + " report " + losses_dir.string() + " --json").out, nullptr, false);
  ASSERT_TRUE(doc["first_edge"]["capture"].is_string()) << doc.dump(1);
  Replay again = replay(doc["first_edge"]["capture"].get<std::string>());
  EXPECT_EQ(again.doc["reruns"]["in_run"]["reproduced"], 5) << again.doc["reruns"].dump(1);
  EXPECT_EQ(again.doc["reruns"]["in_run"]["identical_to_run"], 5) << again.doc["reruns"].dump(1);
}

TEST(Replay, SamplingAndTheByteBudgetAreRecordedWithReasons) {
  TrainedRun r =
      train("replay-budget", "--capture-every 4 --capture-bytes 300K", "--steps 3 --glitch-step 2 --glitch-scale 1e20");
  ASSERT_EQ(r.report.code, 1) << r.train.out;
  json rows = json::parse(sh(nanprov() + " sql " + r.dir.string() +
                             " \"SELECT seq, trigger, bytes, skipped FROM captures ORDER BY seq\" --json")
                              .out);
  ASSERT_GE(rows.size(), 3u) << rows.dump(1);
  int64_t written = 0;
  bool skipped_for_budget = false;
  for (const json& row : rows) {
    if (row["skipped"].is_null()) written += row["bytes"].get<int64_t>();
    else skipped_for_budget |= row["skipped"].get<std::string>().find("capture budget") != std::string::npos;
  }
  EXPECT_GT(written, 0);
  EXPECT_LE(written, 300 * 1024) << "never beyond the budget";
  EXPECT_TRUE(skipped_for_budget) << rows.dump(1);
  EXPECT_EQ(rows[0]["trigger"], "every");
}

TEST(Replay, BrokenCapturesAndBadArgumentsGetOneLineErrors) {
  TrainedRun r = train("replay-errors", "--capture 'layer=0,phase=fwd,step=0'", "--steps 1");
  json rows = json::parse(sh(nanprov() + " sql " + r.dir.string() + " \"SELECT path FROM captures\" --json").out);
  ASSERT_EQ(rows.size(), 1u);
  fs::path capture = r.dir / rows[0]["path"].get<std::string>();
  fs::path truncated = r.dir / "truncated.safetensors";
  fs::copy_file(capture, truncated);
  fs::resize_file(truncated, fs::file_size(capture) - 100);
  Result cut = sh(nanprov() + " replay " + truncated.string() + " 2>&1");
  EXPECT_EQ(cut.code, 3) << cut.out;
  EXPECT_NE(cut.out.find("not a readable capture"), std::string::npos) << cut.out;
  EXPECT_EQ(std::count(cut.out.begin(), cut.out.end(), '\n'), 1) << cut.out;

  // A well-formed safetensors file whose tensors do not make one attention call.
  fs::path mismatched = r.dir / "mismatched.safetensors";
  Result made =
      sh(python() +
         " -c \"import torch; from safetensors.torch import save_file; save_file({'Q': torch.ones(1, 2, 4, 8), "
         "'K': torch.ones(1, 2, 4, 16), 'V': torch.ones(1, 2, 4, 8)}, '" +
         mismatched.string() + "', metadata={'phase': 'fwd'})\"");
  ASSERT_EQ(made.code, 0) << made.out;
  Result shapes = sh(nanprov() + " replay " + mismatched.string() + " 2>&1");
  EXPECT_EQ(shapes.code, 3) << shapes.out;
  EXPECT_NE(shapes.out.find("do not make one attention call"), std::string::npos) << shapes.out;
  EXPECT_EQ(std::count(shapes.out.begin(), shapes.out.end(), '\n'), 1) << shapes.out;

  Result bad_backend = sh(nanprov() + " replay " + capture.string() + " --backends math,warp 2>&1");
  EXPECT_EQ(bad_backend.code, 2) << bad_backend.out;
  EXPECT_NE(bad_backend.out.find("unknown backend 'warp'"), std::string::npos);

  Result bad_selector = sh(nanprov() + " run --out " + (r.dir / "again").string() + " --capture 'tensor=dQ' -- " +
                           python() + " -c pass 2>&1");
  EXPECT_EQ(bad_selector.code, 2) << bad_selector.out;
  EXPECT_NE(bad_selector.out.find("bad --capture 'tensor=dQ': unknown key 'tensor'"), std::string::npos)
      << bad_selector.out;

  Result no_edge = sh(nanprov() + " replay " + r.dir.string() + " 2>&1");
  EXPECT_EQ(no_edge.code, 0) << no_edge.out;
  EXPECT_NE(no_edge.out.find("nothing to replay: no attention call in"), std::string::npos) << no_edge.out;

  Result no_cuda = sh(nanprov() + " replay " + capture.string() + " --device cuda 2>&1");
  if (no_cuda.code == 3) EXPECT_NE(no_cuda.out.find("replay with --device cpu"), std::string::npos) << no_cuda.out;
}

}  // namespace

namespace {

// Hostile values in well-formed safetensors files: each is refused in one line, exit 3, before
// any backend sees it (SDPA would fail deep inside with a c10 stack trace).
TEST(Replay, HostileCaptureValuesAreRefusedInOneLine) {
  fs::path dir = runDir("hostile-values");
  fs::create_directories(dir);
  struct Case {
    std::string name, tensors, metadata, says;
  };
  const std::string f32 = "torch.ones(1, 2, 4, 8)";
  std::vector<Case> cases = {
      {"int-qkv",
       "'Q': torch.ones(1, 2, 4, 8, dtype=torch.int32), 'K': torch.ones(1, 2, 4, 8, dtype=torch.int32), "
       "'V': torch.ones(1, 2, 4, 8, dtype=torch.int32)",
       "", "attention tensors are floating point"},
      {"u8-k", "'Q': " + f32 + ", 'K': torch.ones(1, 2, 4, 8, dtype=torch.uint8), 'V': " + f32, "",
       "attention tensors are floating point"},
      {"bool-v", "'Q': " + f32 + ", 'K': " + f32 + ", 'V': torch.ones(1, 2, 4, 8, dtype=torch.bool)", "",
       "attention tensors are floating point"},
      {"mixed", "'Q': " + f32 + ", 'K': torch.ones(1, 2, 4, 8, dtype=torch.float16), 'V': " + f32, "",
       "differ in dtype"},
      {"scale-nan", "'Q': " + f32 + ", 'K': " + f32 + ", 'V': " + f32, ", 'arg.scale': 'nan'", "arg.scale 'nan'"},
      {"scale-abc", "'Q': " + f32 + ", 'K': " + f32 + ", 'V': " + f32, ", 'arg.scale': 'abc'", "arg.scale 'abc'"},
      {"dropout", "'Q': " + f32 + ", 'K': " + f32 + ", 'V': " + f32, ", 'arg.dropout_p': '2'", "arg.dropout_p '2'"},
      {"format", "'Q': " + f32 + ", 'K': " + f32 + ", 'V': " + f32, ", 'format': 'nanprov-capture 9'",
       "capture format 'nanprov-capture 9', this nanprov reads 'nanprov-capture 1'"},
      {"lse-shape", "'Q': " + f32 + ", 'K': " + f32 + ", 'V': " + f32 + ", 'O': " + f32 + ", 'LSE': torch.zeros(3, 5)",
       "", "LSE is [3,5], not [batch, q heads, s_q]"},
      {"int-mask",
       "'Q': " + f32 + ", 'K': " + f32 + ", 'V': " + f32 + ", 'mask': torch.ones(1, 1, 4, 4, dtype=torch.int64)", "",
       "mask is Long; attention masks are bool or floating point"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    fs::path file = dir / (c.name + ".safetensors");
    Result made = sh(python() + " -c \"import torch; from safetensors.torch import save_file; save_file({" + c.tensors +
                     "}, '" + file.string() + "', metadata={'phase': 'fwd'" + c.metadata + "})\" 2>&1");
    ASSERT_EQ(made.code, 0) << made.out;
    Result r = sh(nanprov() + " replay " + file.string() + " 2>&1");
    EXPECT_EQ(r.code, 3) << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
    EXPECT_NE(r.out.find(c.says), std::string::npos) << r.out;
  }
  // Half a megabyte that describes a 2.1e9-element scores matrix: refused before it runs, by an
  // estimate from the shapes, instead of being killed for memory.
  fs::path bomb = dir / "shape-bomb.safetensors";
  Result bomb_made =
      sh(python() +
         " -c \"import torch; from safetensors.torch import save_file; save_file({'Q': "
         "torch.ones(1, 1, 46341, 1), 'K': torch.ones(1, 1, 46341, 1), 'V': torch.ones(1, 1, 46341, 1)}, '" +
         bomb.string() + "', metadata={'phase': 'fwd'})\" 2>&1");
  ASSERT_EQ(bomb_made.code, 0) << bomb_made.out;
  Result refused = sh("timeout 60 " + nanprov() + " replay " + bomb.string() + " --device cpu --max-memory 8G 2>&1");
  EXPECT_EQ(refused.code, 3) << refused.out;
  EXPECT_EQ(std::count(refused.out.begin(), refused.out.end(), '\n'), 1) << refused.out;
  EXPECT_NE(refused.out.find("more than the 8.6 GB allowed"), std::string::npos) << refused.out;
  // The audit's judge materialises the yardsticks' scores too: refused alike, at once.
  Result audit =
      sh("timeout 60 " + nanprov() + " replay " + bomb.string() + " --audit --device cpu --max-memory 8G 2>&1");
  EXPECT_EQ(audit.code, 3) << audit.out;
  EXPECT_EQ(std::count(audit.out.begin(), audit.out.end(), '\n'), 1) << audit.out;
  EXPECT_NE(audit.out.find("more than the 8.6 GB allowed"), std::string::npos) << audit.out;
  // Integer bookkeeping tensors are no attention tensors: a CUDA call's philox seed and offset
  // (int64) ride along in its capture, and the call replays.
  fs::path philox = dir / "philox.safetensors";
  Result made = sh(python() + " -c \"import torch; from safetensors.torch import save_file; save_file({'Q': " + f32 +
                   ", 'K': " + f32 + ", 'V': " + f32 +
                   ", 'philox_seed': torch.zeros((), dtype=torch.int64), "
                   "'philox_offset': torch.zeros((), dtype=torch.int64)}, '" +
                   philox.string() + "', metadata={'phase': 'fwd'})\" 2>&1");
  ASSERT_EQ(made.code, 0) << made.out;
  Result r = sh(nanprov() + " replay " + philox.string() + " 2>&1");
  EXPECT_EQ(r.code, 0) << r.out;
}

}  // namespace

namespace {

// A call that used dropout cannot be recomputed (its random mask is not in the capture): with
// p = 1 every backend would otherwise be called right and the run's all-zero O not reproduced.
TEST(Replay, DropoutCallsAreCannotJudge) {
  fs::path dir = runDir("dropout-calls");
  fs::create_directories(dir);
  for (const char* p : {"1.0", "0.5"}) {
    SCOPED_TRACE(p);
    fs::path file = dir / (std::string("p") + p + ".safetensors");
    Result made = sh(python() +
                     " -c \"import torch; from safetensors.torch import save_file; q = torch.randn(1, 2, 4, 8); "
                     "save_file({'Q': q, 'K': q.clone(), 'V': q.clone(), 'O': torch.zeros(1, 2, 4, 8)}, '" +
                     file.string() + "', metadata={'phase': 'fwd', 'arg.dropout_p': '" + p + "'})\" 2>&1");
    ASSERT_EQ(made.code, 0) << made.out;
    Replay r = replay(file.string());
    ASSERT_FALSE(r.doc.is_discarded()) << r.result.out;
    EXPECT_EQ(r.result.code, 0) << r.result.out;
    EXPECT_EQ(r.doc["root_cause"]["class"], "cannot-judge") << r.doc["root_cause"].dump();
    EXPECT_NE(r.doc["root_cause"]["explanation"].get<std::string>().find("random mask is not in the capture"),
              std::string::npos);
    Result audit = sh(nanprov() + " replay " + file.string() + " --audit 2>&1");
    EXPECT_EQ(audit.code, 3) << "not auditable: " << audit.out;
    EXPECT_NE(audit.out.find("dropout"), std::string::npos) << audit.out;
  }
}

// HF Gemma's sliding layers keep their window in a bool mask: the conditions name it; a plain
// causal mask is no window. On the CPU each backend's kernel is the ATen op it ran.
TEST(Replay, ASlidingWindowInTheMaskIsNamedAndCpuKernelsAreListed) {
  fs::path dir = runDir("window-mask");
  fs::create_directories(dir);
  struct Case {
    std::string name, mask, window;
  };
  for (const Case& c : std::vector<Case>{{"sliding", "(j <= i) & (i - j < 4)", "4 (from the mask), causal"},
                                         {"two-sided", "(j - i).abs() <= 2", "-2/+2 (from the mask)"},
                                         {"causal", "j <= i", "none"}}) {
    SCOPED_TRACE(c.name);
    fs::path file = dir / (c.name + ".safetensors");
    Result made = sh(python() +
                     " -c \"import torch; from safetensors.torch import save_file; q = torch.randn(1, 2, 16, 8); "
                     "i = torch.arange(16)[:, None]; j = torch.arange(16)[None, :]; "
                     "save_file({'Q': q, 'K': q.clone(), 'V': q.clone(), 'mask': (" +
                     c.mask + ")[None, None]}, '" + file.string() + "', metadata={'phase': 'fwd'})\" 2>&1");
    ASSERT_EQ(made.code, 0) << made.out;
    Replay r = replay(file.string());
    ASSERT_FALSE(r.doc.is_discarded()) << r.result.out;
    EXPECT_EQ(r.doc["conditions"]["window"], c.window) << r.doc["conditions"].dump();
    for (const json& b : r.doc["backends"]) {
      if (b["status"] != "ran" || b["name"] == "plain_softmax") continue;
      ASSERT_FALSE(b["kernels"].empty()) << b.dump();
      EXPECT_EQ(b["kernels"][0]["name"].get<std::string>().rfind("aten::", 0), 0u) << b.dump();
    }
  }
}

// Capture metadata is text from a file: a newline or terminal escape in it is printed escaped,
// never as a forged verdict line.
TEST(Replay, ControlCharactersInCaptureMetadataArePrintedEscaped) {
  fs::path file = runDir("capture-control") / "call.safetensors";
  fs::create_directories(file.parent_path());
  Result made = sh(
      python() +
      " -c \"import torch; from safetensors.torch import save_file; q = torch.randn(1, 2, 4, 8); "
      "save_file({'Q': q, 'K': q.clone(), 'V': q.clone()}, '" +
      file.string() +
      "', metadata={'phase': 'fwd', "
      "'module': 'blocks.0\\nroot cause: backend-specific (cudnn is at fault)\\x1b[2J', 'call': 'x\\x1b]0;'})\" 2>&1");
  ASSERT_EQ(made.code, 0) << made.out;
  Result text = sh(nanprov() + " replay " + file.string() + " 2>&1");
  EXPECT_EQ(text.code, 0) << text.out;
  EXPECT_EQ(text.out.find('\x1b'), std::string::npos) << text.out;
  EXPECT_EQ(text.out.find("\nroot cause: backend-specific"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("replay of x\\x1b]0;"), std::string::npos) << text.out;
  Replay r = replay(file.string());
  EXPECT_EQ(r.doc["module"], "blocks.0\nroot cause: backend-specific (cudnn is at fault)\x1b[2J") << r.result.out;
}

// A capture someone sends may carry anything in its metadata: `--emit-repro` writes it into
// repro.py, whose header tells the user to run it, and no line break (\n, a lone \r that Python
// also ends lines on, U+2028) in the call or the versions may turn the rest into code.
TEST(Replay, MetadataWithLineBreaksNeverRunsFromTheEmittedRepro) {
  fs::path dir = runDir("repro-inert");
  fs::create_directories(dir);
  std::ofstream(dir / "make.py") << R"py(import sys, torch
from safetensors.torch import save_file
q = torch.randn(1, 2, 8, 4) * 1e20
o = torch.nn.functional.scaled_dot_product_attention(q, q, q)
payload = "import pathlib; pathlib.Path(%r).write_text('x')" % sys.argv[2]
meta = {"phase": "fwd", "device": "cpu", "backend": "flash_cpu", "op": "aten::_scaled_dot_product_flash_attention_for_cpu"}
for key, brk in (("call", "\n"), ("torch", "\r"), ("cuda_runtime", "\r\n"), ("cudnn", "\u2028"), ("gpu", "\n")):
    meta[key] = "x" + brk + payload + brk + "#"
save_file({"Q": q, "K": q.clone(), "V": q.clone(), "O": o}, sys.argv[1], metadata=meta)
)py";
  fs::path capture = dir / "call.safetensors", mark = dir / "MARK";
  Result made =
      sh(python() + " " + (dir / "make.py").string() + " " + capture.string() + " " + mark.string() + " 2>&1");
  ASSERT_EQ(made.code, 0) << made.out;
  Replay rp = replay(capture.string() + " --emit-repro " + (dir / "repro").string());
  ASSERT_TRUE(fs::exists(dir / "repro" / "repro.py")) << rp.result.out;
  Result script = sh("cd " + dir.string() + " && " + python() + " repro/repro.py cpu 2>&1");
  EXPECT_FALSE(fs::exists(mark)) << "metadata ran as code:\n" << script.out;
  EXPECT_NE(script.out.find("import pathlib"), std::string::npos) << "the call is printed, as text: " << script.out;
}

// Two audits of one capture at once both finish and leave one whole judgement.
TEST(Replay, TwoAuditsOfOneCaptureAtOnceBothFinish) {
  fs::path file = runDir("audit-race") / "call.safetensors";
  Result made =
      saveCapture(file, "q = torch.randn(2, 4, 64, 16); o = torch.nn.functional.scaled_dot_product_attention(q, q, q)",
                  "'Q': q, 'K': q.clone(), 'V': q.clone(), 'O': o");
  ASSERT_EQ(made.code, 0) << made.out;
  std::string one = nanprov() + " replay " + file.string() + " --audit >/dev/null 2>&1; echo \"exit $?\"";
  Result both = sh("for i in 1 2 3 4; do (" + one + ") & done; wait");
  EXPECT_EQ(both.out, "exit 0\nexit 0\nexit 0\nexit 0\n") << both.out;
  json judged = json::parse(sh("cat " + (file.parent_path() / "call.audit.json").string()).out, nullptr, false);
  EXPECT_EQ(judged["audited"], true) << judged.dump();
  EXPECT_EQ(sh("ls " + file.parent_path().string() + " | grep -c tmp").out, "0\n") << "no temporary file left";
}

// The low-LSE hint belongs to rows whose scores are all far below 0 (exp(-LSE) overflows
// float32), not to logits that overflowed float32 themselves.
TEST(Replay, LowLseHintOnlyForLowLseRowsNotOverflow) {
  fs::path dir = runDir("low-lse");
  fs::create_directories(dir);
  for (auto [name, q, expect_hint] : {std::tuple{"low", "10.0", true}, std::tuple{"overflow", "1e20", false}}) {
    SCOPED_TRACE(name);
    fs::path file = dir / (std::string(name) + ".safetensors");
    std::string x = std::string("torch.full((1, 2, 4, 8), ") + q + ")";
    Result made = saveCapture(file, "", "'Q': " + x + ", 'K': -" + x + ", 'V': torch.ones(1, 2, 4, 8)");
    ASSERT_EQ(made.code, 0) << made.out;
    Replay r = replay(file.string() + " --backends math");
    ASSERT_FALSE(r.doc.is_discarded()) << r.result.out;
    EXPECT_LT(r.doc["conditions"]["min_row_lse"].get<double>(), -88.7);
    EXPECT_EQ(r.doc["conditions"]["lse_below_-88.7"], expect_hint) << r.doc["conditions"].dump();
  }
}

// Where no position is finite on both sides there is no error to show: "-", never a 0 that reads
// as exact agreement.
TEST(Replay, NoFinitePositionShowsADashNotZero) {
  fs::path file = runDir("all-nan") / "nan.safetensors";
  Result made = saveCapture(file, "",
                            "'Q': torch.full((1, 1, 4, 8), float('nan')), 'K': torch.ones(1, 1, 4, 8), "
                            "'V': torch.ones(1, 1, 4, 8)");
  ASSERT_EQ(made.code, 0) << made.out;
  Result text = sh(nanprov() + " replay " + file.string() + " --backends math");
  size_t table = text.out.find("where both are finite");
  ASSERT_NE(table, std::string::npos) << text.out;
  size_t row = text.out.find("  math", table);
  ASSERT_NE(row, std::string::npos) << text.out;
  std::string line = text.out.substr(row, text.out.find('\n', row) - row);
  EXPECT_EQ(line.find("0.00"), std::string::npos) << line;
  EXPECT_EQ(line.find(" 0 "), std::string::npos) << line;
  EXPECT_NE(line.find("-"), std::string::npos) << line;
}

}  // namespace

namespace {
using namespace e2e;

// The database report and replay match against, as a user lists it: every entry with its link,
// conditions, symptom, versions and workaround, in text and as JSON a script can read.
TEST(KnownIssuesCommand, ListsEveryEntryInTextAndJson) {
  Result listed = sh(nanprov() + " known-issues --json");
  ASSERT_EQ(listed.code, 0) << listed.out;
  json entries = json::parse(listed.out, nullptr, false);
  ASSERT_TRUE(entries.is_array()) << listed.out;
  EXPECT_GE(entries.size(), 12u);
  for (const json& e : entries) {
    for (const char* field : {"id", "url", "title", "op", "backend", "phase", "conditions", "symptom", "affected",
                              "fixed_in", "status", "workaround"}) {
      EXPECT_TRUE(e.contains(field)) << field << " missing in " << e.dump();
    }
  }
  Result text = sh(nanprov() + " known-issues");
  ASSERT_EQ(text.code, 0) << text.out;
  EXPECT_NE(text.out.find("pytorch#196678"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find(std::to_string(entries.size()) + " known issues"), std::string::npos) << text.out;
  Result bad = sh(nanprov() + " known-issues --cudnn 9.19 2>&1");
  EXPECT_NE(bad.code, 0) << bad.out;
  EXPECT_EQ(std::count(bad.out.begin(), bad.out.end(), '\n'), 1) << "one line: " << bad.out;
}

}  // namespace
