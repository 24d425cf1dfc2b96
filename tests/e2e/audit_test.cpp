// End-to-end: `nanprov run --audit` on real training. Finite corruption (--inject value=zero,
// value=scale:F) stands for the silent-wrong kernels of seeds 002 and 003 on the CPU; on the H200
// the real one is cuDNN reading a float32 bias given with bf16 queries. The audit must find them at
// their call, find nothing on clean runs, and never change the training.
#include <gtest/gtest.h>

#include "tests/e2e/e2e_support.h"

namespace {
using namespace e2e;

const json* findingNamed(const json& doc, const std::string& name) {
  for (const json& f : doc["audit_findings"]) {
    if (f["name"] == name) return &f;
  }
  return nullptr;
}

TEST(Audit, InjectedAllZeroOutputIsAFindingAtItsCall) {
  TrainedRun r = train("audit-zero", "--audit --inject 'layer=0,tensor=O,value=zero,step=0'", "--steps 3 --mask");
  EXPECT_EQ(r.train.code, 5) << "the training exited 0, the audit found a wrong output: " << r.train.out;
  EXPECT_NE(r.train.out.find("nanprov: audit rank0:layer0:call0 (step 0, fwd, flash_cpu): O all-zero"),
            std::string::npos)
      << "printed as soon as it was judged: " << r.train.out;
  ASSERT_EQ(r.report.code, 5) << r.report.out;
  EXPECT_EQ(r.doc["outcome"], "audit_finding");
  EXPECT_EQ(r.doc["clean"], false);
  // The forward, and its backward, which computed from that O and says so.
  ASSERT_EQ(r.doc["audit_findings"].size(), 2u) << r.doc["audit_findings"].dump(1);
  const json& f = r.doc["audit_findings"][0];
  const json* bwd = findingNamed(r.doc, "rank0:layer0:call1");
  ASSERT_NE(bwd, nullptr) << r.doc["audit_findings"].dump(1);
  EXPECT_EQ((*bwd)["received_wrong"], "O all-zero");
  expectFields(f, {{"rank", 0},
                   {"layer", 0},
                   {"call", 0},
                   {"step", 0},
                   {"phase", "fwd"},
                   {"backend", "flash_cpu"},
                   {"kernel", "aten::_scaled_dot_product_flash_attention_for_cpu"},
                   {"verdict", "all-zero"}});
  EXPECT_EQ(f["tensors"]["O"]["verdict"], "all-zero");
  EXPECT_EQ(f["tensors"]["O"]["all_zero_where"], "the whole tensor");
  EXPECT_EQ(f["tensors"]["LSE"]["verdict"], "ok") << "only O was corrupted";
  EXPECT_EQ(f["conditions"]["query_dtype"], "float32");
  ASSERT_TRUE(f["capture"].is_string());
  EXPECT_TRUE(fs::exists(f["capture"].get<std::string>()));
  EXPECT_GE(r.doc["audit"]["calls"].get<int64_t>(), 4) << "the first pass: both layers, forward and backward";
  EXPECT_TRUE(r.doc["first_edge"].is_null()) << "no value was non-finite";

  // The finding's capture, audited again by hand; and the report can be told to only warn.
  Result again = sh(nanprov() + " replay " + f["capture"].get<std::string>() + " --audit --json");
  EXPECT_EQ(again.code, 1) << again.out;
  json doc = json::parse(again.out, nullptr, false);
  EXPECT_EQ(doc["verdict"], "all-zero") << again.out;
  EXPECT_EQ(sh(nanprov() + " report " + r.dir.string() + " --audit-warn-only").code, 0);
  Result text = sh(nanprov() + " report " + r.dir.string());
  EXPECT_EQ(text.out.rfind("rank0:layer0:call0  audit finding: finite outputs that are all-zero", 0), 0u) << text.out;
  EXPECT_NE(text.out.find("O all-zero: max error"), std::string::npos) << text.out;

  // A judgement damaged by hand is counted as unreadable, with what to do, never a failed report.
  const std::string judged = fs::path(f["capture"].get<std::string>()).replace_extension(".audit.json").string();
  ASSERT_TRUE(fs::exists(judged));
  sh("printf '{\"format\": \"nanprov-audit 1\", \"audited\": true, \"finding\": true, \"tensors\": 3}' > " + judged);
  Result damaged = sh(nanprov() + " report " + r.dir.string() + " 2>&1");
  EXPECT_EQ(damaged.code, 5) << "the backward's finding stands: " << damaged.out;
  EXPECT_NE(damaged.out.find("is not an audit result"), std::string::npos) << damaged.out;
  EXPECT_NE(damaged.out.find("--audit"), std::string::npos) << damaged.out;
}

// Every call of every step judged (--audit-every 1), on a slice (GQA, a padding mask over three
// batches): dQ scaled by 4 at one step is found at that call and no other, and its forward and the
// other gradients pass.
TEST(Audit, ACompleteAuditFindsAOneStepFaultExactlyAtItsStepAndLayer) {
  TrainedRun r = train("audit-scale",
                       "--audit --audit-every 1 --audit-slice-bytes 1K --audit-warn-only "
                       "--inject 'layer=1,phase=bwd,tensor=dQ,value=scale:4,step=1'",
                       "--steps 3 --mask --kv-heads 2 --batch 3");
  EXPECT_EQ(r.train.code, 0) << "--audit-warn-only: " << r.train.out;
  EXPECT_EQ(r.report.code, 0) << "the run asked for warnings only: " << r.report.out;
  ASSERT_EQ(r.doc["audit_findings"].size(), 1u) << r.doc["audit_findings"].dump(1);
  const json* f = findingNamed(r.doc, "rank0:layer1:call3");
  ASSERT_NE(f, nullptr) << r.doc["audit_findings"].dump(1);
  EXPECT_EQ((*f)["step"], 1);
  EXPECT_EQ((*f)["phase"], "bwd");
  EXPECT_EQ((*f)["verdict"], "silent-wrong");
  EXPECT_EQ((*f)["tensors"]["dQ"]["verdict"], "silent-wrong");
  EXPECT_EQ((*f)["tensors"]["dK"]["verdict"], "ok");
  EXPECT_EQ((*f)["tensors"]["dV"]["verdict"], "ok");
  EXPECT_GT((*f)["tensors"]["dQ"]["max_abs_err"].get<double>(),
            100 * (*f)["tensors"]["dQ"]["yardstick_max_err"].get<double>());
  EXPECT_EQ((*f)["slice"], "batches 0,2 of 3; heads 0-3 of 4 (KV heads 0-1 of 2)");
  EXPECT_EQ((*f)["conditions"]["kv_heads"], 2);
  EXPECT_EQ(r.doc["audit"]["calls"], 12) << "2 layers, forward and backward, at each of 3 steps";
}

// Layer 1's forward output is scaled; its backward computes from that O: the finding there says
// its inputs from the forward were already wrong, so the user looks at the forward (a finding of
// its own), not at the backward kernel.
TEST(Audit, BackwardFindingSaysWhenItsForwardGaveItWrongOutputs) {
  TrainedRun r = train("audit-upstream", "--audit --inject 'layer=1,tensor=O,value=scale:3,step=0'", "--steps 2");
  ASSERT_EQ(r.report.code, 5) << r.report.out;
  ASSERT_EQ(r.doc["audit_findings"].size(), 2u) << r.doc["audit_findings"].dump(1);
  ASSERT_NE(findingNamed(r.doc, "rank0:layer1:call0"), nullptr) << "the forward itself";
  const json* found = findingNamed(r.doc, "rank0:layer1:call1");
  ASSERT_NE(found, nullptr) << r.doc["audit_findings"].dump(1);
  const json& f = *found;
  EXPECT_EQ(f["name"], "rank0:layer1:call1");
  EXPECT_EQ(f["phase"], "bwd");
  EXPECT_EQ(f["received"]["O"]["verdict"], "silent-wrong");
  EXPECT_EQ(f["received_wrong"], "O silent-wrong");
  Result text = sh(nanprov() + " report " + r.dir.string());
  EXPECT_NE(text.out.find("its inputs from the forward were already wrong (O silent-wrong)"), std::string::npos)
      << text.out;
}

// The audit only reads: losses stay bit-identical, and a clean run has nothing to report, even
// judged on slices of every call at every step (a wrong slice of Q, K, V or the mask would show
// as a finding here).
TEST(Audit, CleanRunHasNoFindingsAndLossesAreBitIdentical) {
  std::string args = example("tiny_transformer.py") + " --steps 4 --mask --kv-heads 2 --batch 3 --print-losses";
  Result plain = sh(python() + " " + args);
  fs::path dir = runDir("audit-clean");
  Result audited = sh(nanprov() + " run --out " + dir.string() + " --audit --audit-every 1 --audit-slice-bytes 1K -- " +
                      python() + " " + args + " 2>/dev/null");
  ASSERT_EQ(plain.code, 0) << plain.out;
  ASSERT_EQ(audited.code, 0) << audited.out;
  EXPECT_NE(plain.out.find("step3 loss 0x"), std::string::npos) << plain.out;
  EXPECT_EQ(plain.out, audited.out);
  Result report = sh(nanprov() + " report " + dir.string() + " --json");
  EXPECT_EQ(report.code, 0) << report.out;
  json doc = json::parse(report.out, nullptr, false);
  EXPECT_EQ(doc["outcome"], "clean");
  EXPECT_EQ(doc["audit_findings"].size(), 0u);
  EXPECT_EQ(doc["audit"]["calls"], 16) << "2 layers, forward and backward, at each of 4 steps";
  EXPECT_GT(doc["audit"]["bytes"].get<int64_t>(), 0);
  EXPECT_EQ(doc["audit"]["unjudged"], 0);
  EXPECT_EQ(doc["audit"]["coverage"]["layers"], json::parse("[0, 1]"));
  EXPECT_TRUE(doc["audit"]["coverage"]["never_judged"].empty());
  // Clean calls' captures are deleted once judged (their judgements stay): a long audit fills no disk.
  int captures = 0, judgements = 0;
  for (const auto& entry : fs::directory_iterator(dir / "captures")) {
    captures += entry.path().extension() == ".safetensors";
    judgements += entry.path().string().ends_with(".audit.json");
  }
  EXPECT_EQ(captures, 0);
  EXPECT_EQ(judgements, 16);
}

// Calls the audit cannot take are counted with the reason, never silently dropped.
// ... and a call that did not fit is tried again at its next step, so each step counts again; the
// coverage names what was never judged, and why.
TEST(Audit, CallsOverTheBudgetAreReportedAsNotAudited) {
  TrainedRun r = train("audit-budget", "--audit --audit-max-bytes 1", "--steps 2");
  ASSERT_EQ(r.report.code, 0) << r.report.out;
  EXPECT_EQ(r.doc["audit"]["calls"], 0);
  ASSERT_EQ(r.doc["audit"]["not_audited"].size(), 1u) << r.doc["audit"].dump(1);
  EXPECT_EQ(r.doc["audit"]["not_audited"][0]["calls"], 8) << "2 layers x 2 phases, tried at each of 2 steps";
  EXPECT_NE(r.doc["audit"]["not_audited"][0]["why"].get<std::string>().find("over the audit budget"),
            std::string::npos);
  const json& never = r.doc["audit"]["coverage"]["never_judged"];
  ASSERT_EQ(never.size(), 4u) << never.dump(1);
  EXPECT_NE(never[0]["why"].get<std::string>().find("over the audit budget"), std::string::npos) << never.dump(1);
  Result text = sh(nanprov() + " report " + r.dir.string());
  EXPECT_NE(text.out.find("8 not audited: over the audit budget"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("never judged: rank 0 layer 0 fwd (over the audit budget"), std::string::npos) << text.out;
  // Nothing was judged, so the audit vouches for none of the conditions its calls ran in: the run
  // is partial, never clean, and says which regimes went unjudged.
  EXPECT_EQ(r.doc["outcome"], "partial") << r.report.out;
  const json& regimes = r.doc["audit"]["coverage"]["regimes"];
  EXPECT_GE(regimes["seen"].get<int64_t>(), 4) << regimes.dump(1);
  EXPECT_EQ(regimes["judged"], 0);
  EXPECT_EQ(regimes["not_judged"].size(), regimes["seen"].get<size_t>());
  EXPECT_NE(text.out.find("the audit judged 0 of the "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("regime not judged: rank 0 layer 0 fwd, "), std::string::npos) << text.out;
}

// The first pass judges every layer: a fault confined to a middle layer's data (all-zero O in layer
// 2 of 4, at every step) is found there by the default audit.
TEST(Audit, APersistentFaultInAMiddleLayerIsFoundByTheFirstPass) {
  TrainedRun r = train("audit-middle", "--audit --inject 'layer=2,tensor=O,value=zero'", "--steps 3 --layers 4");
  ASSERT_EQ(r.report.code, 5) << r.report.out;
  const json* f = findingNamed(r.doc, "rank0:layer2:call0");
  ASSERT_NE(f, nullptr) << r.doc["audit_findings"].dump(1);
  EXPECT_EQ((*f)["step"], 0);
  EXPECT_EQ((*f)["tensors"]["O"]["verdict"], "all-zero");
  for (const json& finding : r.doc["audit_findings"]) EXPECT_EQ(finding["layer"], 2) << finding.dump();
  const json& coverage = r.doc["audit"]["coverage"];
  EXPECT_EQ(coverage["layers"], json::parse("[0, 1, 2, 3]"));
  EXPECT_EQ(coverage["per_layer"].size(), 8u) << "4 layers, forward and backward";
  Result text = sh(nanprov() + " report " + r.dir.string());
  EXPECT_NE(text.out.find("coverage, rank 0: layers 0-3 judged"), std::string::npos) << text.out;
}

// After the first pass the rotation judges the least recently judged layer each step: a fault that
// starts mid-run (step 6, layer 2 of 4) is found within (layers) steps of its start, and not before.
TEST(Audit, AFaultThatStartsMidRunIsFoundWithinOneRotation) {
  TrainedRun r =
      train("audit-rotation", "--audit --audit-budget 100 --inject 'layer=2,tensor=O,value=zero,from-step=6'",
            "--steps 14 --layers 4");
  ASSERT_EQ(r.report.code, 5) << r.report.out;
  int64_t first = -1;
  for (const json& f : r.doc["audit_findings"]) {
    EXPECT_EQ(f["layer"], 2) << f.dump();
    if (f["phase"] == "fwd" && (first < 0 || f["step"].get<int64_t>() < first)) first = f["step"].get<int64_t>();
  }
  EXPECT_GE(first, 6) << "nothing was wrong before";
  EXPECT_LE(first, 6 + 4) << r.doc["audit_findings"].dump(1);
  EXPECT_EQ(r.doc["audit"]["coverage"]["rotation"]["rotations"], 13) << "a layer at every step after the first";
  Result text = sh(nanprov() + " report " + r.dir.string());
  EXPECT_NE(text.out.find("each layer was judged again about every 4 steps"), std::string::npos) << text.out;
}

// Issue 63: a mask value arrives in layer 2 at step 5 (a band of -30000 in an additive mask of
// zeros) and the kernel goes wrong with it (an injected finite 2% error from that step). The call's
// conditions leave the regime its layer was judged in at step 0, so the default --audit judges it
// again at that very call, however tight the rotation's budget, and replay names the change.
TEST(Audit, AMaskValueArrivingMidRunIsJudgedAtItsStep) {
  TrainedRun r = train("audit-regime", "--audit --inject 'layer=2,tensor=O,value=scale:1.02,from-step=5'",
                       "--steps 8 --layers 4 --band-layer 2 --band-from-step 5");
  ASSERT_EQ(r.report.code, 5) << r.report.out;
  const json* first = nullptr;
  for (const json& f : r.doc["audit_findings"]) {
    EXPECT_EQ(f["layer"], 2) << f.dump();
    if (f["phase"] == "fwd" && (!first || f["step"] < (*first)["step"])) first = &f;
  }
  ASSERT_NE(first, nullptr) << r.doc["audit_findings"].dump(1);
  EXPECT_EQ((*first)["step"], 5) << "judged at the call whose mask changed";
  EXPECT_GE(r.doc["audit"]["coverage"]["rotation"]["regime_changes"].get<int64_t>(), 1) << r.doc["audit"].dump(1);
  ASSERT_TRUE((*first)["capture"].is_string()) << first->dump(1);
  Result replay = sh(nanprov() + " replay " + (*first)["capture"].get<std::string>() + " 2>&1");
  EXPECT_NE(replay.out.find(
                "the audit judged this call because its conditions changed: the mask's largest |x| went from 0 to "
                "3e+04 at step 5"),
            std::string::npos)
      << replay.out;
  // No value went non-finite: the run directory replays the audit's first finding, as verdict does.
  Result by_run = sh(nanprov() + " replay " + r.dir.string() + " 2>&1");
  EXPECT_EQ(by_run.out.find("nothing to replay"), std::string::npos) << by_run.out;
  EXPECT_NE(by_run.out.find("the audit judged this call because its conditions changed"), std::string::npos)
      << by_run.out;

  // The same run without the fault: no finding, and the new regime judged once per phase, not at
  // every step.
  TrainedRun clean = train("audit-regime-clean", "--audit", "--steps 8 --layers 4 --band-layer 2 --band-from-step 5");
  EXPECT_EQ(clean.report.code, 0) << clean.report.out;
  EXPECT_TRUE(clean.doc["audit_findings"].empty()) << clean.doc["audit_findings"].dump(1);
  const int64_t changes = clean.doc["audit"]["coverage"]["rotation"]["regime_changes"];
  EXPECT_GE(changes, 1);
  EXPECT_LE(changes, 2) << "layer 2's forward and backward, once each";
  Result text = sh(nanprov() + " report " + clean.dir.string());
  EXPECT_NE(text.out.find("judged again when their conditions changed: " + std::to_string(changes)), std::string::npos)
      << text.out;
  // Every regime seen was judged, the band's included, at the step it arrived: a clean run.
  EXPECT_EQ(clean.doc["outcome"], "clean") << text.out;
  const json& regimes = clean.doc["audit"]["coverage"]["regimes"];
  EXPECT_EQ(regimes["judged"], regimes["seen"]) << regimes.dump(1);
  bool band_judged_at_5 = false;
  for (const json& k : clean.doc["audit"]["coverage"]["per_layer"]) {
    if (k["layer"] != 2 || k["phase"] != "fwd") continue;
    for (const json& g : k["regimes"]) {
      band_judged_at_5 |= g["first_seen"] == 5 && g["conditions"].get<std::string>().starts_with("mask |x| 3e+04") &&
                          g["judged_at"].is_number() && g["judged_at"].get<int64_t>() >= 5;
    }
  }
  EXPECT_TRUE(band_judged_at_5) << clean.doc["audit"]["coverage"].dump(1);
  EXPECT_NE(text.out.find("regimes of conditions: "), std::string::npos) << text.out;
}

// A subtle fault with no change of conditions (2% off from step 3, layer 1) is still found by the
// default audit's rotation, before a 40-step run ends: the first pass's captures, however long
// they took, are not charged to the rotation's budget, nor does it wait for the judge to judge
// them. The model is big enough for steps of a few hundred ms: the judge (its engine takes seconds
// to start on the CPU) must keep up with the rotation; a 4-second run ends before its first answer.
TEST(Audit, ASubtleFaultWithNoConditionChangeIsFoundByTheRotation) {
  TrainedRun r = train("audit-subtle", "--audit --inject 'layer=1,tensor=O,value=scale:1.02,from-step=3'",
                       "--steps 40 --layers 2 --seq 128 --d-model 128 --batch 8");
  ASSERT_EQ(r.report.code, 5) << r.report.out;
  int64_t first = -1;
  for (const json& f : r.doc["audit_findings"]) {
    EXPECT_EQ(f["layer"], 1) << f.dump();
    if (first < 0 || f["step"].get<int64_t>() < first) first = f["step"].get<int64_t>();
  }
  EXPECT_GE(first, 3) << "nothing was wrong before";
  EXPECT_LT(first, 40) << r.doc["audit"].dump(1);
}

// FlashAttention (bshd and packed thd) and plain-softmax attention are judged like SDPA calls, on
// slices along their own axes, and clean ones are ok.
TEST(Audit, EveryAttentionKindIsJudgedOnASliceOfItsOwnLayout) {
  ScopedEnv standin("PYTHONPATH", std::string(NANPROV_TEST_SCRIPTS) + "/flash_attn_standin");
  for (std::string layout : {"", " --varlen"}) {
    SCOPED_TRACE(layout);
    TrainedRun r = train("audit-fa2" + std::string(layout.empty() ? "" : "-varlen"), "--audit --audit-slice-bytes 1K",
                         "--flavour fa2 --dtype float32 --steps 2" + layout, "flash_attn_training.py");
    ASSERT_EQ(r.report.code, 0) << r.report.out;
    // 3 layers, forward and backward, in the first pass; the rotation may judge one layer again at step 1.
    const int64_t judged = r.doc["audit"]["calls"].get<int64_t>();
    EXPECT_TRUE(judged == 6 || judged == 8) << judged;
    EXPECT_TRUE(r.doc["audit"]["not_audited"].empty()) << r.doc["audit"].dump(1);
    Result slices = sh("cat " + (r.dir / "captures").string() + "/*.audit.json | grep -h '\"slice\"' | sort -u");
    EXPECT_NE(slices.out.find(layout.empty() ? "batches 0-1 of 2; heads 0,3 of 4" : "every sequence; heads 0,3 of 4"),
              std::string::npos)
        << slices.out;
  }
  TrainedRun mha = train("audit-mha", "--audit --audit-slice-bytes 1K", "--steps 2", "mha_padding.py");
  EXPECT_TRUE(mha.doc["audit"]["not_audited"].empty()) << mha.doc["audit"].dump(1);
  EXPECT_GE(mha.doc["audit"]["calls"].get<int64_t>(), 1) << mha.doc["audit"].dump(1);
}

// Every kind nanprov probes is offered to the audit; what the reference cannot rebuild is said,
// not passed as clean: compiled FlexAttention's capture lacks its score_mod. The fast path's
// capture holds the projections, and is judged.
TEST(Audit, SaysWhichCallsItCouldNotJudge) {
  ColdInductorCache cold("audit-flex");
  TrainedRun flex = train("audit-flex", "--audit", "--compile", "flex_attention.py");
  ASSERT_EQ(flex.report.code, 0) << flex.train.out;
  EXPECT_EQ(flex.doc["audit"]["calls"], 0);
  ASSERT_EQ(flex.doc["audit"]["not_audited"].size(), 1u) << flex.doc["audit"].dump(1);
  EXPECT_NE(flex.doc["audit"]["not_audited"][0]["why"].get<std::string>().find("score_mod"), std::string::npos)
      << flex.doc["audit"].dump(1);
  TrainedRun fast = train("audit-fastpath", "--audit", "", "fast_path_encoder.py");
  ASSERT_EQ(fast.report.code, 0) << fast.train.out;
  // One signature on torch 2.13; torch 2.11 runs the fast path's forward through more op
  // signatures (4 on the GPU machine), each judged.
  EXPECT_GE(fast.doc["audit"]["calls"].get<int64_t>(), 1) << fast.doc["audit"].dump(1);
  EXPECT_EQ(fast.doc["audit_findings"].size(), 0u) << fast.doc["audit_findings"].dump(1);
  EXPECT_TRUE(fast.doc["audit"]["not_audited"].empty()) << fast.doc["audit"].dump(1);
}

TEST(Audit, AuditOptionsWithoutAuditAreAUsageError) {
  Result r = sh(nanprov() + " run --audit-every 2 -- " + python() + " -c pass 2>&1");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--audit"), std::string::npos) << r.out;
}

// The real one on the H200 (torch 2.11, cuDNN 9.19): given a float32 additive bias (ALiBi built in
// full precision) with bf16 queries, default dispatch runs cuDNN, whose outputs are finite and
// about 100% wrong (relative L2 error near 1). No finite check can see it; the audit does.
TEST(Gpu, AuditFindsCudnnWrongWithAFloat32BiasAndBf16Queries) {
  REQUIRE_CUDA();
  TrainedRun r =
      train("gpu-audit-alibi", "--audit",
            "--device cuda --dtype bfloat16 --steps 2 --batch 4 --seq 256 --heads 4 --d-model 512 --alibi-f32");
  EXPECT_EQ(r.train.code, 5) << r.train.out;
  ASSERT_EQ(r.report.code, 5) << r.report.out;
  EXPECT_TRUE(r.doc["first_edge"].is_null()) << "every value was finite";
  const json* f = findingNamed(r.doc, "rank0:layer0:call0");
  ASSERT_NE(f, nullptr) << r.doc["audit_findings"].dump(1);
  EXPECT_EQ((*f)["backend"], "cudnn");
  EXPECT_EQ((*f)["verdict"], "silent-wrong");
  EXPECT_EQ((*f)["tensors"]["O"]["verdict"], "silent-wrong");
  EXPECT_LT((*f)["tensors"]["O"]["cosine"].get<double>(), 0.99);
  EXPECT_EQ((*f)["conditions"]["mask_dtype"], "float32");
  EXPECT_EQ((*f)["conditions"]["query_dtype"], "bfloat16");
  EXPECT_NE((*f)["kernel"].get<std::string>().find("cudnn"), std::string::npos) << (*f)["kernel"];
  bool named = false;
  for (const json& k : (*f)["known_issues"]) named = named || k["id"] == "pytorch#191612";
  EXPECT_TRUE(named) << "the finding names the public report of this bug: " << (*f)["known_issues"].dump(1);
}

// The same cuDNN fault confined to one deep layer that starts mid-run: layer 2 of 4 gets its bias
// in float32 from step 2 on (the others in bf16, which cuDNN reads right). Found there, at its
// first call, and in no other layer.
TEST(Gpu, AuditFindsTheCudnnFaultInOneDeepLayerFromMidRun) {
  REQUIRE_CUDA();
  TrainedRun r =
      train("gpu-audit-deep", "--audit",
            "--device cuda --dtype bfloat16 --steps 4 --batch 4 --seq 256 --heads 4 --d-model 512 --layers 4 "
            "--alibi-f32-layer 2 --alibi-f32-from-step 2");
  ASSERT_EQ(r.report.code, 5) << r.report.out;
  ASSERT_FALSE(r.doc["audit_findings"].empty());
  for (const json& f : r.doc["audit_findings"]) {
    EXPECT_EQ(f["layer"], 2) << f.dump();
    EXPECT_GE(f["step"].get<int64_t>(), 2) << f.dump();
  }
  const json& first = r.doc["audit_findings"][0];
  EXPECT_EQ(first["step"], 2);
  EXPECT_EQ(first["backend"], "cudnn");
  EXPECT_EQ(first["conditions"]["mask_dtype"], "float32");
  EXPECT_EQ(r.doc["audit"]["coverage"]["layers"], json::parse("[0, 1, 2, 3]"));
}

// No false alarms on real backends: clean bf16 training over head_dim 64 to 512, causal and with a
// bool padding mask, with GQA, audited, finds nothing.
TEST(Gpu, AuditOfCleanBf16RunsFindsNothing) {
  REQUIRE_CUDA();
  for (int hd : {64, 128, 256, 512}) {
    for (const char* shape : {"--causal --kv-heads 2", "--mask --kv-heads 2"}) {
      std::string args = "--device cuda --dtype bfloat16 --steps 2 --batch 4 --seq 256 --heads 4 --d-model " +
                         std::to_string(4 * hd) + " " + shape;
      TrainedRun r = train("gpu-audit-clean-" + std::to_string(hd), "--audit", args);
      EXPECT_EQ(r.report.code, 0) << args << "\n" << r.report.out;
      EXPECT_EQ(r.doc["audit_findings"].size(), 0u) << args << "\n" << r.doc["audit_findings"].dump(1);
      EXPECT_GE(r.doc["audit"]["calls"].get<int64_t>(), 4) << args << ": every layer, forward and backward";
    }
  }
}

}  // namespace
