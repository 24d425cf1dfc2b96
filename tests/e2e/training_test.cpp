// End-to-end: real PyTorch training on the CPU under `nanprov run`, judged by what
// `nanprov report --json` and the other commands say. Nothing is mocked.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>

#include "tests/e2e/e2e_support.h"

namespace {
using namespace e2e;

TEST(EndToEnd, InjectedForwardNaN) {
  TrainedRun r = train("inject-fwd", "--inject 'layer=1,phase=fwd,tensor=O,step=2,value=nan'", "--steps 4");
  ASSERT_EQ(r.train.code, runCodeForCleanExit(r)) << r.train.out;
  ASSERT_EQ(r.report.code, 1) << r.report.out;
  const json& e = r.doc["first_edge"];
  expectFields(e, {{"name", "rank0:layer1:call4"}, {"step", 2}, {"phase", "fwd"}});
  EXPECT_EQ(strings(e["nonfinite_outputs"]), std::vector<std::string>{"O"});
  expectFields(e, {{"inputs_finite", true}, {"origin", "attention"}, {"injected", true}});
  EXPECT_EQ(e["counts"]["O"]["nan"], 1);
  EXPECT_EQ(e["module"], "layers.1.attn");
  EXPECT_NE(r.train.out.find("rank0:layer1:call4"), std::string::npos) << "run prints the summary";
}

TEST(EndToEnd, InjectedBackwardNaN) {
  TrainedRun r = train("inject-bwd", "--inject 'layer=0,phase=bwd,tensor=dQ,step=1'", "--steps 3");
  ASSERT_EQ(r.report.code, 1) << r.train.out;
  const json& e = r.doc["first_edge"];
  expectFields(e, {{"name", "rank0:layer0:call3"},
                   {"step", 1},
                   {"phase", "bwd"},
                   {"op", "aten::_scaled_dot_product_flash_attention_for_cpu_backward"}});
  EXPECT_EQ(strings(e["nonfinite_outputs"]), std::vector<std::string>{"dQ"});
  EXPECT_EQ(e["inputs_finite"], true);
  EXPECT_EQ(e["injected"], true);
  EXPECT_FALSE(e["fwd_seq"].is_null()) << "backward linked to its forward";
}

TEST(EndToEnd, RealOverflowInsideAttentionIsASourceEdge) {
  TrainedRun r = train("overflow", "", "--steps 4 --glitch-step 2 --glitch-scale 1e20");
  ASSERT_EQ(r.report.code, 1) << r.train.out;
  const json& e = r.doc["first_edge"];
  expectFields(e, {{"name", "rank0:layer0:call4"},
                   {"step", 2},
                   {"phase", "fwd"},
                   {"origin", "attention"},
                   {"inputs_finite", true},
                   {"injected", false}});
  EXPECT_EQ(strings(e["nonfinite_outputs"]), (std::vector<std::string>{"O", "LSE"}));
  EXPECT_GT(e["counts"]["O"]["nan"].get<int>(), 0);
  EXPECT_GE(r.doc["propagation"]["layers"].get<int>(), 2);
  // Where the huge inputs came from, as far as attention saw: no attention call before this one
  // in the step, so from the batch (the glitch) or the modules before layers.0.attn.
  EXPECT_GT(e["input_trail"]["largest_abs"].get<double>(), 1e19);
  EXPECT_TRUE(e["input_trail"]["previous_call"].is_null()) << e["input_trail"].dump();
  Result text = sh(nanprov() + " report " + r.dir.string());
  EXPECT_NE(text.out.find("the large inputs came with the batch or from the modules in or before layers.0.attn"),
            std::string::npos)
      << text.out;
}

// value=zero and value=scale:F corrupt a whole output and keep it finite, as the silent-wrong
// kernels of seeds 002 and 003 do: the finite checks see nothing wrong (that is the point), and
// the stored counts show exactly what was done.
TEST(EndToEnd, InjectedZeroAndScaleStayFiniteAndShowInTheCounts) {
  TrainedRun r = train(
      "silent", "--inject 'layer=1,tensor=O,step=1,value=zero' --inject 'layer=0,tensor=dQ,step=2,value=scale:1000'",
      "--steps 3");
  ASSERT_EQ(r.train.code, runCodeForCleanExit(r)) << r.train.out;
  EXPECT_EQ(r.report.code, 0) << "finite corruption is no non-finite edge: " << r.report.out;
  auto tensor = [](const json& call, const std::string& role) {
    for (const json& t : call["tensors"]) {
      if (t["role"] == role) return t;
    }
    return json();
  };
  json fwd = commandJson("calls", r.dir, "--layer 1 --phase fwd");
  ASSERT_EQ(fwd.size(), 3u);
  EXPECT_EQ(fwd[1]["injected_tensor"], "O");
  EXPECT_EQ(tensor(fwd[1], "O")["all_zero"], true);
  EXPECT_EQ(tensor(fwd[0], "O")["all_zero"], false);
  json bwd = commandJson("calls", r.dir, "--layer 0 --phase bwd");
  ASSERT_EQ(bwd.size(), 3u);
  EXPECT_EQ(bwd[2]["injected_tensor"], "dQ");
  const double scaled = tensor(bwd[2], "dQ")["max_abs"].get<double>(),
               before = tensor(bwd[1], "dQ")["max_abs"].get<double>();
  EXPECT_GT(scaled, 30 * before) << "dQ scaled by 1000 at step 2";
}

TEST(EndToEnd, NonFiniteFromUpstreamIsNotBlamedOnAttention) {
  TrainedRun r = train("upstream", "", "--steps 4 --glitch-step 2 --glitch-scale 3e38");
  ASSERT_EQ(r.report.code, 1) << r.train.out;
  const json& e = r.doc["first_edge"];
  expectFields(e, {{"name", "rank0:layer0:call4"}, {"origin", "upstream"}, {"inputs_finite", false}, {"phase", "fwd"}});
  Result text = sh(nanprov() + " report " + r.dir.string());
  EXPECT_NE(text.out.find("origin is outside attention"), std::string::npos) << text.out;
  // Replay has nothing to rerun: that is the answer, not unreadable input, and it says where to look.
  ASSERT_TRUE(r.doc["first_source_edge"].is_null()) << r.doc.dump(1);
  Result replay = sh(nanprov() + " replay " + r.dir.string() + " 2>&1");
  EXPECT_EQ(replay.code, 0) << replay.out;
  EXPECT_EQ(replay.out,
            "nothing to replay: attention received the non-finite values (rank0:layer0:call4 took them "
            "from upstream) and made none itself: run again with nanprov run --trail to name the module "
            "that made it\n");
  json doc = json::parse(sh(nanprov() + " replay " + r.dir.string() + " --json").out, nullptr, false);
  EXPECT_EQ(doc["replayed"], false) << doc.dump();
}

TEST(EndToEnd, CleanRunReportsNothingAndExitsZero) {
  TrainedRun r = train("clean", "", "--steps 3 --mask");
  ASSERT_EQ(r.train.code, runCodeForCleanExit(r)) << r.train.out;
  EXPECT_EQ(r.report.code, 0) << r.report.out;
  EXPECT_EQ(r.doc["clean"], true);
  EXPECT_TRUE(r.doc["first_edge"].is_null());
  EXPECT_EQ(r.doc["summary"]["calls"], 3 * 2 * 2) << "3 steps x 2 layers x (fwd + bwd)";
  EXPECT_EQ(r.doc["summary"]["steps"], 3);
  Result calls = sh(nanprov() + " calls " + r.dir.string() + " --phase bwd --layer 1 --json");
  json list = json::parse(calls.out);
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(list[0]["call"], 1);
  bool has_mask = false;
  for (const json& t : list[0]["tensors"]) has_mask = has_mask || t["role"] == "mask";
  EXPECT_TRUE(has_mask);
  // The probes' own time, by stage, for the user and for scripts.
  const json& meta = r.doc["ranks"][0]["meta"];
  const std::string cost = meta.value("probe_cost", "");
  EXPECT_NE(cost.find("naming "), std::string::npos) << cost;
  EXPECT_NE(cost.find("over 12 calls"), std::string::npos) << cost;
  EXPECT_NE(cost.find("after the trace window"), std::string::npos) << "the window closes after 2 steps: " << cost;
  EXPECT_GT(std::stoll(meta.value("probe_ns:describing", "0")), 0) << "every call's tensors were measured";
  EXPECT_GT(std::stoll(meta.value("probe_ns:dispatching", "0")), 0) << "every probed call takes its arguments";
  EXPECT_GT(std::stoll(meta.value("probe_ns:sentinel", "0")), 0) << "the gradient sentinel ran at every step";
}

TEST(EndToEnd, MathBackendIsProbedThroughAutogradHooks) {
  TrainedRun r = train("math", "--inject 'layer=1,phase=bwd,tensor=dV,step=1'", "--steps 3 --math");
  ASSERT_EQ(r.report.code, 1) << r.train.out;
  const json& e = r.doc["first_edge"];
  EXPECT_EQ(e["name"], "rank0:layer1:call3");
  EXPECT_EQ(e["backend"], "math");
  EXPECT_EQ(strings(e["nonfinite_outputs"]), std::vector<std::string>{"dV"});
  EXPECT_EQ(e["inputs_finite"], true);
}

TEST(EndToEnd, TorchrunTwoRanksFaultOnRankOneOnly) {
  fs::path dir = runDir("ddp");
  std::string torchrun = fs::path(python()).parent_path().string() + "/torchrun";
  // Loopback only: CI sandboxes have no other interface gloo could use.
  Result t = sh("GLOO_SOCKET_IFNAME=lo " + nanprov() + " run --out " + dir.string() +
                " --inject 'rank=1,layer=0,phase=bwd,tensor=dK,step=1' -- " + torchrun +
                " --standalone --nproc-per-node=2 " + example("tiny_transformer.py") + " --steps 3 --ddp 2>&1");
  ASSERT_EQ(t.code, 1) << "torchrun exits 0; nanprov found the injected edge: " << t.out;
  EXPECT_TRUE(fs::exists(dir / "rank-0.sqlite"));
  EXPECT_TRUE(fs::exists(dir / "rank-1.sqlite"));
  Result rep = sh(nanprov() + " report " + dir.string() + " --json");
  ASSERT_EQ(rep.code, 1) << rep.out;
  json doc = json::parse(rep.out);
  EXPECT_EQ(doc["summary"]["ranks"], 2);
  EXPECT_EQ(doc["first_edge"]["name"], "rank1:layer0:call3");
  EXPECT_EQ(doc["first_edge"]["rank"], 1);
  EXPECT_EQ(strings(doc["first_edge"]["nonfinite_outputs"]), std::vector<std::string>{"dK"});
  Result meta =
      sh(nanprov() + " sql " + dir.string() + " \"SELECT value FROM meta WHERE key='world_size' AND rank=1\"");
  EXPECT_NE(meta.out.find("2"), std::string::npos) << meta.out;
}

TEST(EndToEnd, HuggingFaceLlamaLayersComeFromModulePaths) {
  TrainedRun r = train("hf", "--inject 'layer=1,phase=fwd,tensor=O,step=1'", "--steps 2", "hf_llama.py");
  ASSERT_EQ(r.report.code, 1) << r.train.out;
  const json& e = r.doc["first_edge"];
  EXPECT_EQ(e["name"], "rank0:layer1:call2");
  EXPECT_EQ(e["module"], "model.layers.1.self_attn");
  Result q = sh(nanprov() + " sql " + r.dir.string() +
                " \"SELECT DISTINCT layer, module FROM calls WHERE phase='fwd' ORDER BY layer\" --json");
  json rows = json::parse(q.out);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["module"], "model.layers.0.self_attn");
  EXPECT_EQ(rows[1]["layer"], 1);
}

TEST(EndToEnd, LossesAreBitIdenticalWithAndWithoutNanprov) {
  std::string args = example("tiny_transformer.py") + " --steps 5 --mask --print-losses";
  Result plain = sh(python() + " " + args);
  fs::path dir = runDir("identical");
  // --capture-every 1: every call is also copied out for a capture, which must only read.
  Result probed =
      sh(nanprov() + " run --out " + dir.string() + " --capture-every 1 -- " + python() + " " + args + " 2>/dev/null");
  ASSERT_EQ(plain.code, 0);
  ASSERT_EQ(probed.code, 0);
  EXPECT_NE(plain.out.find("step4 loss 0x"), std::string::npos) << plain.out;
  EXPECT_EQ(plain.out, probed.out);
  EXPECT_EQ(sh(nanprov() + " report " + dir.string()).code, 0) << "and the probes did record the run";
  json counts = json::parse(sh(nanprov() + " sql " + dir.string() +
                               " \"SELECT (SELECT COUNT(*) FROM calls) AS calls, (SELECT COUNT(*) FROM captures "
                               "WHERE skipped IS NULL) AS captured\" --json")
                                .out);
  ASSERT_EQ(counts.size(), 1u);
  EXPECT_GT(counts[0]["captured"].get<int64_t>(), 0);
  EXPECT_EQ(counts[0]["captured"], counts[0]["calls"]) << "every call was captured";
}

TEST(EndToEnd, KilledTrainingPassesTheSignalAndKeepsWhatWasFlushed) {
  TrainedRun r = train("killed", "", "--steps 6 --die-after-step 2");
  EXPECT_EQ(r.train.code, 128 + 9) << r.train.out;
  EXPECT_NE(r.train.out.find("killed by"), std::string::npos) << r.train.out;
  ASSERT_EQ(r.report.code, 0) << r.report.out;
  EXPECT_GE(r.doc["summary"]["calls"].get<int>(), 3 * 2 * 2 - 2) << "steps 0-2 were flushed";
}

TEST(EndToEnd, ChildExitCodePassesThrough) {
  fs::path dir = runDir("exit");
  Result r = sh(nanprov() + " run --out " + dir.string() + " -- " + python() + " -c 'import sys; sys.exit(7)' 2>&1");
  EXPECT_EQ(r.code, 7) << r.out;
}

TEST(Errors, ClearOneLineMessagesAndExitCodes) {
  Result missing_cmd = sh(nanprov() + " run --out " + runDir("nocmd").string() + " -- no-such-command-xyz 2>&1");
  EXPECT_EQ(missing_cmd.code, 127);
  EXPECT_NE(missing_cmd.out.find("command not found: no-such-command-xyz"), std::string::npos);

  Result no_run = sh(nanprov() + " report /nonexistent/run 2>&1");
  EXPECT_EQ(no_run.code, 3);
  EXPECT_NE(no_run.out.find("no such run directory"), std::string::npos);

  fs::path corrupt = runDir("corrupt");
  fs::create_directories(corrupt);
  std::ofstream(corrupt / "rank-0.sqlite") << std::string(8192, 'z');
  Result bad = sh(nanprov() + " report " + corrupt.string() + " 2>&1");
  EXPECT_EQ(bad.code, 3);
  EXPECT_NE(bad.out.find("not a readable nanprov store"), std::string::npos) << bad.out;
  EXPECT_EQ(std::count(bad.out.begin(), bad.out.end(), '\n'), 1) << bad.out;

  Result unknown = sh(nanprov() + " report --colour 2>&1");
  EXPECT_EQ(unknown.code, 2) << unknown.out;

  Result unknown_run_option = sh(nanprov() + " run --run-dir x -- true 2>&1");
  EXPECT_EQ(unknown_run_option.code, 2) << unknown_run_option.out;
  EXPECT_NE(unknown_run_option.out.find("unknown option --run-dir"), std::string::npos) << unknown_run_option.out;

  Result bad_trace = sh(nanprov() + " run --trace-steps -3 -- true 2>&1");
  EXPECT_EQ(bad_trace.code, 2) << bad_trace.out;

  Result bad_inject = sh(nanprov() + " run --inject 'tensor=Q' -- true 2>&1");
  EXPECT_EQ(bad_inject.code, 2);
  EXPECT_NE(bad_inject.out.find("is an input"), std::string::npos) << bad_inject.out;

  Result doctor = sh(nanprov() + " doctor --python " + python() + " --json");
  json d = json::parse(doctor.out, nullptr, false);
  ASSERT_FALSE(d.is_discarded()) << doctor.out;
  EXPECT_EQ(doctor.code, 0) << doctor.out;
  EXPECT_EQ(d["ok"], true);
  Result doctor_text = sh(nanprov() + " doctor --python " + python());
  EXPECT_EQ(doctor_text.out.find("null"), std::string::npos) << "no JSON null in the text: " << doctor_text.out;
}

// A preflight Python killed by a signal is said to be killed, not to lack torch.
TEST(Errors, KilledTorchPreflightSaysSo) {
  fs::path killed = fakeExecutable(runDir("killed-python"), "python", "#!/bin/sh\nkill -9 $$\n");
  Result r =
      sh(nanprov() + " run --out " + runDir("killed-run").string() + " -- " + killed.string() + " train.py 2>&1");
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_NE(r.out.find("was killed by signal 9"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("not importable"), std::string::npos) << r.out;
}

// What a bug report quotes: the version and commit, and the torch, CUDA, cuDNN and CUPTI nanprov
// was built against ("none" for what this build lacks).
TEST(Cli, VersionNamesTheCommitAndWhatItWasBuiltAgainst) {
  Result r = sh(nanprov() + " --version 2>&1");
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string torch = sh(python() + " -c 'import torch; print(torch.__version__, end=\"\")'").out;
  EXPECT_TRUE(
      std::regex_search(r.out, std::regex("^nanprov [0-9]+\\.[0-9]+\\.[0-9]+ \\(commit [0-9a-f]{12}(-dirty)?\\)\n")))
      << r.out;
  EXPECT_NE(r.out.find("built against torch " + torch + " (C++11 ABI "), std::string::npos) << r.out;
  EXPECT_TRUE(std::regex_search(
      r.out, std::regex("\nbuilt with CUDA toolkit (none|[0-9.]+), cuDNN (none|[0-9.]+), CUPTI (none|API [0-9]+)\n$")))
      << r.out;
  // The CUDA it names is torch's: a CPU build (+cpu) names no CUDA runtime, whatever toolkit
  // compiled nanprov's own kernels (issue 61).
  const std::string torch_cuda =
      sh(python() + " -c 'import torch; print(torch.version.cuda or \"none\", end=\"\")'").out;
  if (torch_cuda == "none") {
    EXPECT_NE(r.out.find("), a CPU build: no CUDA runtime\nbuilt with CUDA toolkit "), std::string::npos) << r.out;
    std::string rest = std::regex_replace(r.out, std::regex("CUDA toolkit"), "");
    EXPECT_FALSE(std::regex_search(rest, std::regex("CUDA [0-9]"))) << "a CPU torch runs no CUDA: " << r.out;
  } else {
    EXPECT_NE(r.out.find("), CUDA " + torch_cuda + "\n"), std::string::npos) << r.out;
  }
}

TEST(Errors, PythonWithoutTorchIsRefusedBeforeTraining) {
  fs::path venv = runDir("venv-no-torch");
  ASSERT_EQ(sh(python() + " -m venv --without-pip " + venv.string()).code, 0);
  Result r =
      sh(nanprov() + " run --out " + runDir("notorch").string() + " -- " + venv.string() + "/bin/python -c pass 2>&1");
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_NE(r.out.find("torch is not importable"), std::string::npos) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
}

// A later `pip install torch==OTHER` in the environment: the training runs as it is, uninstrumented
// (its own exit code, no run directory), after one line that names the rebuild.
TEST(Errors, TorchOfAnotherVersionRunsTheTrainingUninstrumented) {
  // An interpreter that reports a different torch, as a CUDA venv next to the CPU build would, and
  // exits 7 when it trains.
  fs::path other = fakeExecutable(runDir("other-torch"), "python3",
                                  "#!/bin/sh\nif [ \"$1\" = train.py ]; then echo trained; exit 7; fi\n"
                                  "echo '{\"importable\": true, \"torch\": \"0.0.1+other\", \"cxx11_abi\": \"1\"}'\n");
  fs::path dir = runDir("other");
  Result r = sh(nanprov() + " run --out " + dir.string() + " -- " + other.string() + " train.py 2>&1");
  EXPECT_EQ(r.code, 7) << r.out;
  EXPECT_NE(r.out.find("has torch 0.0.1+other"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("built against torch"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rebuild it for this torch: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("the training runs uninstrumented\ntrained\n"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir / "run.json")) << "nothing recorded, nothing claimed";
}

TEST(EndToEnd, CpuCallsListTheirAtenOpAsTheKernel) {
  TrainedRun r = train("kernels-cpu", "", "--steps 2 --glitch-step 1");
  ASSERT_EQ(r.report.code, 1) << r.report.out;
  const json& edge = r.doc["first_edge"];
  ASSERT_EQ(edge["kernels"].size(), 1u);
  EXPECT_EQ(edge["kernels"][0]["name"], edge["op"]);
  EXPECT_EQ(edge["kernels"][0]["device"], "cpu");
  EXPECT_EQ(edge["device"], "cpu");

  json all = commandJson("kernels", r.dir);
  ASSERT_EQ(all.size(), 2u * 2 * 2) << "2 layers x fwd+bwd x 2 steps";
  for (const json& call : all) {
    EXPECT_EQ(call["attribution"], "the ATen CPU op");
    ASSERT_EQ(call["kernels"].size(), 1u);
    EXPECT_EQ(call["kernels"][0]["name"], call["op"]);
  }
  std::string name = edge["name"];
  json one = commandJson("kernels", r.dir, "--call " + name);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0]["call"], name);

  Result missing = sh(nanprov() + " kernels " + r.dir.string() + " --call rank0:layer9:call0 2>&1");
  EXPECT_EQ(missing.code, 3);
  EXPECT_NE(missing.out.find("no call named rank0:layer9:call0"), std::string::npos) << missing.out;
}

TEST(Errors, SqlRefusesWrites) {
  TrainedRun r = train("sql", "", "--steps 1");
  Result write = sh(nanprov() + " sql " + r.dir.string() + " \"DELETE FROM r0.calls\" 2>&1");
  EXPECT_EQ(write.code, 3);
  EXPECT_NE(write.out.find("read-only"), std::string::npos) << write.out;
  Result count = sh(nanprov() + " sql " + r.dir.string() + " \"SELECT COUNT(*) AS n FROM calls\" --json");
  EXPECT_EQ(json::parse(count.out)[0]["n"], 2 * 2);
}

}  // namespace
