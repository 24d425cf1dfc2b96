#include "report/audit_findings.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "store/audit_file.h"
#include "tests/report/synthetic_run.h"
#include "tests/temp_dir.h"

namespace nanprov::report {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The engine's judgement of one audited call (replay/replay_render.cpp: auditJson), a finding.
json allZeroJudgement() {
  json doc = json::parse(R"({
    "call": "rank0:layer1:call5", "step": "2", "phase": "fwd", "op": "aten::sdpa", "backend": "flash_cpu",
    "kernel": null, "slice": null, "audited": true, "not_audited_why": null, "verdict": "all-zero", "finding": true,
    "seconds": 0.5,
    "tensors": {"O": {"verdict": "all-zero", "max_abs_err": 0.52, "yardstick_max_err": 1.2e-07, "cosine": 0.0,
                      "all_zero_where": "tensor", "nonfinite": 0, "nonfinite_where": null, "floor": null},
                "LSE": {"verdict": "ok", "max_abs_err": 0.0}},
    "received": null, "received_wrong": null, "conditions": {"causal": false}, "conditions_text": "no mask",
    "known_issues": [{"id": "pytorch#1", "url": "https://example", "title": "zeros", "fix": "2.9", "status": "open",
                      "workaround": "use math"},
                     {"id": 5}]
  })");
  doc["format"] = store::kAuditFormat;
  return doc;
}

// One rank's run in `dir` with audit captures: a finding, a call skipped, a judgement of the wrong
// shape and a capture not judged yet.
store::RunData auditedRun(const fs::path& dir) {
  store::RunData run = synthetic::runOf({}, 3, dir.string());
  run.settings.audit.on = true;
  run.ranks[0].counters.audit_rotation = AuditRotation{.rotations = 3, .held_back = 1};
  auto capture = [&](int64_t seq, const std::string& path, const std::string& skipped = "") {
    return CaptureRecord{.rank = 0,
                         .seq = seq,
                         .trigger = CaptureTrigger::kAudit,
                         .path = path,
                         .bytes = 1 << 20,
                         .skipped = skipped,
                         .step = 2,
                         .layer = 1,
                         .phase = Phase::kForward};
  };
  run.captures = {capture(5, "captures/a.safetensors"), capture(6, "", "over --audit-max-bytes"),
                  capture(7, "captures/b.safetensors"), capture(8, "captures/c.safetensors")};
  EXPECT_TRUE(store::writeAuditFile((dir / "captures/a.safetensors").string(), allZeroJudgement()).ok());
  EXPECT_TRUE(
      store::writeAuditFile(
          (dir / "captures/b.safetensors").string(),
          json{{"format", store::kAuditFormat}, {"audited", true}, {"finding", true}, {"tensors", json::array({1})}})
          .ok());
  return run;
}

TEST(AuditFindings, AJudgementIsReadTypedAndWhatWasNotJudgedIsCounted) {
  const fs::path dir = testing::freshDir("audit-findings");
  fs::create_directories(dir / "captures");
  const AuditSummary a = readAudit(auditedRun(dir));
  EXPECT_TRUE(a.on);
  EXPECT_EQ(a.audited, 1);
  EXPECT_EQ(a.unjudged, 1) << "c.safetensors has no judgement yet";
  EXPECT_EQ(a.bytes, 3 << 20);
  EXPECT_EQ(a.coverage.rotations, 3);
  EXPECT_EQ(a.coverage.held_back, 1);
  ASSERT_EQ(a.not_audited.size(), 2u);
  EXPECT_EQ(a.not_audited.at("over --audit-max-bytes"), 1);
  ASSERT_EQ(a.findings.size(), 1u);
  const AuditFinding& f = a.findings[0];
  EXPECT_EQ(f.name, "rank0:layer1:call5");
  EXPECT_EQ(f.layer, 1);
  EXPECT_EQ(f.call, 5);
  EXPECT_EQ(f.step, 2);
  EXPECT_EQ(f.verdict, "all-zero");
  EXPECT_FALSE(f.kernel);
  ASSERT_EQ(f.tensors.size(), 2u);
  EXPECT_EQ(f.tensors[1].role, "O");
  EXPECT_EQ(f.tensors[1].all_zero_where, "tensor");
  EXPECT_FALSE(f.tensors[1].floor) << "written null: no number";
  ASSERT_EQ(f.known_issues.size(), 1u) << "an entry with a field that is not text is not shown";
  EXPECT_EQ(f.known_issues[0].workaround, "use math");
  EXPECT_EQ(f.capture, (dir / "captures/a.safetensors").string());
  // The judgement of the wrong shape is counted as unreadable, and says how to write it again.
  bool unreadable = false;
  for (const auto& [why, n] : a.not_audited)
    unreadable |= why.find("is not an audit result (its tensors are not an object)") != std::string::npos;
  EXPECT_TRUE(unreadable);
}

// --json passes the engine's measures on as written; the text names each tensor that is not ok.
TEST(AuditFindings, JsonPassesTheJudgementOnAndTextNamesWhatIsWrong) {
  const fs::path dir = testing::freshDir("audit-findings-out");
  fs::create_directories(dir / "captures");
  const AuditSummary a = readAudit(auditedRun(dir));
  const json findings = auditFindingsJson(a);
  ASSERT_EQ(findings.size(), 1u);
  EXPECT_EQ(findings[0]["tensors"], allZeroJudgement()["tensors"]);
  EXPECT_EQ(findings[0]["conditions"], allZeroJudgement()["conditions"]);
  EXPECT_EQ(findings[0]["kernel"], nullptr);
  EXPECT_EQ(findings[0]["known_issues"].size(), 1u);
  const json cost = auditCostJson(a);
  EXPECT_EQ(cost["findings"], 1);
  EXPECT_EQ(cost["unjudged"], 1);
  const std::string text = auditText(a);
  EXPECT_NE(
      text.find(
          "  audit finding rank0:layer1:call5 (step 2, fwd, flash_cpu): all-zero against the float64 reference\n"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("    O all-zero: max error 0.52 (yardstick 1.2e-07), cosine 0, tensor\n"), std::string::npos)
      << text;
  EXPECT_EQ(text.find("LSE ok"), std::string::npos) << "a tensor that is ok is not listed";
  EXPECT_NE(text.find("    known issue: pytorch#1 (zeros); 2.9; workaround: use math\n"), std::string::npos) << text;
  EXPECT_NE(text.find("1 audit captures not judged yet"), std::string::npos) << text;
  EXPECT_EQ(auditText(AuditSummary{}), "") << "nothing when the run was not audited";
}

// The regimes the probes counted: judged where a judgement of their key exists at the step they
// were last taken at; taken with none, or never taken, they are named with why.
TEST(AuditFindings, EveryRegimeSeenIsJudgedOrNamedWithWhy) {
  const fs::path dir = testing::freshDir("audit-regimes");
  fs::create_directories(dir / "captures");
  store::RunData run = auditedRun(dir);
  auto regime = [](int64_t first, int64_t last, int64_t judged, const std::string& conditions) {
    return AuditRegime{.layer = 1,
                       .phase = Phase::kForward,
                       .first_seen = first,
                       .last_seen = last,
                       .calls = last - first + 1,
                       .last_judged = judged,
                       .conditions = conditions};
  };
  run.ranks[0].counters.audit_regimes = {{"k0.r0", regime(0, 2, 2, "mask |x| 0, O 1")},
                                         {"k0.r1", regime(3, 5, -1, "mask |x| 3e+04, O 1")},
                                         {"k0.r2", regime(6, 6, 6, "mask |x| 1e+09, O 1")}};
  const AuditSummary a = readAudit(run);
  EXPECT_EQ(a.coverage.regimes_seen, 3);
  EXPECT_EQ(a.coverage.regimes_judged, 1) << "only the first: a.safetensors judged it at step 2";
  ASSERT_EQ(a.coverage.keys.size(), 1u);
  const auto& regimes = a.coverage.keys[0].regimes;
  ASSERT_EQ(regimes.size(), 3u);
  EXPECT_EQ(regimes[0].judged_at, 2);
  EXPECT_FALSE(regimes[1].judged_at);
  EXPECT_FALSE(regimes[1].taken_at);
  EXPECT_EQ(regimes[2].taken_at, 6);

  const json cov = auditCostJson(a)["coverage"];
  EXPECT_EQ(cov["regimes"]["seen"], 3);
  EXPECT_EQ(cov["regimes"]["judged"], 1);
  ASSERT_EQ(cov["regimes"]["not_judged"].size(), 2u);
  EXPECT_EQ(cov["regimes"]["not_judged"][0]["conditions"], "mask |x| 3e+04, O 1");
  EXPECT_EQ(cov["regimes"]["not_judged"][0]["first_seen"], 3);
  EXPECT_EQ(cov["regimes"]["not_judged"][1]["why"].get<std::string>().rfind("taken at step 6, with no judgement (", 0),
            0u)
      << cov["regimes"]["not_judged"][1].dump();
  EXPECT_EQ(cov["per_layer"][0]["regimes"].size(), 3u);
  EXPECT_EQ(cov["per_layer"][0]["regimes"][0]["judged_at"], 2);

  const std::string text = auditText(a);
  EXPECT_NE(text.find("    regimes of conditions: 3 seen, 1 judged"), std::string::npos) << text;
  EXPECT_NE(
      text.find("    regime not judged: rank 0 layer 1 fwd, mask |x| 3e+04, O 1 (steps 3-5, 3 calls): never judged: "),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("over --audit-max-bytes"), std::string::npos) << text;
  EXPECT_NE(text.find("(steps 6, 1 call): taken at step 6, with no judgement ("), std::string::npos) << text;
}

}  // namespace
}  // namespace nanprov::report
