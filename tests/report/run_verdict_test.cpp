#include "report/run_verdict.h"

#include <gtest/gtest.h>

#include <set>
#include <tuple>
#include <vector>

#include "base/exit_codes.h"
#include "tests/base/sample_device_identity.h"
#include "tests/report/synthetic_report.h"

namespace nanprov::report {
namespace {

using nlohmann::json;
using synthetic::edgeReport;
using synthetic::facts;

const DeviceIdentity& kGpu = testing::kSampleGpu;

// A run whose first edge attention made, on node17's GPU, captured.
Report gpuEdge() {
  Report r = edgeReport();
  r.first_edge->device = kGpu;
  r.first_source_edge->device = kGpu;
  return r;
}

// Replay's JSON as the engine writes it, for one root cause.
// Its reruns give `distinct` bitwise results, on `replayed_on` (the run's device is cuda:0).
json replayJson(const std::string& cause, const std::string& injected = "", int distinct = 1,
                const std::string& replayed_on = "cuda:0") {
  return {
      {"root_cause",
       {{"class", cause},
        {"explanation", "why " + cause},
        {"backend", "cudnn"},
        {"kernel", nullptr},
        {"tensors", json::array()}}},
      {"injected", injected.empty() ? json(nullptr) : json(injected)},
      {"captured_on", "cuda:0"},
      {"replayed_on", replayed_on},
      {"reruns", {{"runs", 5}, {"reproduced", cause == "nondeterministic" ? 2 : 0}, {"distinct_results", distinct}}}};
}

VerdictClass classFor(const std::string& cause) { return verdictOf(gpuEdge(), replayAnswerOf(replayJson(cause))).cls; }

// Every root cause replay gives lands in one class, and the ones that do not settle kernel,
// device or data stay undetermined: never a false attribution.
TEST(RunVerdict, EachRootCauseHasItsClass) {
  // The device is suspected only when its reruns agree bit for bit, on the run's kind of device.
  EXPECT_EQ(verdictOf(gpuEdge(), replayAnswerOf(replayJson("not-reproduced", "", 2))).cls, VerdictClass::kUndetermined);
  EXPECT_EQ(verdictOf(gpuEdge(), replayAnswerOf(replayJson("not-reproduced", "", 1, "cpu"))).cls,
            VerdictClass::kUndetermined);
  EXPECT_EQ(classFor("backend-specific"), VerdictClass::kKernel);
  EXPECT_EQ(classFor("forward-ok-backward-wrong"), VerdictClass::kKernel);
  EXPECT_EQ(classFor("nondeterministic"), VerdictClass::kNondeterministicKernel);
  EXPECT_EQ(classFor("not-reproduced"), VerdictClass::kSuspectDevice);
  EXPECT_EQ(classFor("input-caused"), VerdictClass::kDataOrModel);
  EXPECT_EQ(classFor("precision-limit"), VerdictClass::kDataOrModel);
  EXPECT_EQ(classFor("fully-masked-rows"), VerdictClass::kDataOrModel);
  for (const char* unsettled :
       {"none", "cannot-judge", "reference-suspect", "captured-backend-suspect", "a-cause-of-the-future"}) {
    EXPECT_EQ(classFor(unsettled), VerdictClass::kUndetermined) << unsettled;
  }
}

// Each class has its own code and its action for the job; the old codes keep their meaning.
TEST(RunVerdict, EachClassHasItsExitCodeAndAction) {
  const std::vector<std::tuple<VerdictClass, int, const char*, const char*>> table = {
      {VerdictClass::kNoFault, 0, "no_fault", "none"},
      {VerdictClass::kKernel, 10, "kernel", "fix_code"},
      {VerdictClass::kNondeterministicKernel, 11, "nondeterministic_kernel", "requeue"},
      {VerdictClass::kSuspectDevice, 12, "suspect_device", "exclude_node"},
      {VerdictClass::kDataOrModel, 13, "data_or_model", "fix_code"},
      {VerdictClass::kUndetermined, 14, "undetermined", "inspect"},
      {VerdictClass::kNothingChecked, kNothingChecked, "nothing_checked", "inspect"}};
  std::set<int> codes;
  for (const auto& [cls, code, name, action] : table) {
    EXPECT_EQ(verdictExitCode(cls), code) << name;
    EXPECT_STREQ(verdictClassName(cls), name);
    EXPECT_STREQ(verdictActionName(verdictAction(cls)), action) << name;
    codes.insert(verdictExitCode(cls));
  }
  EXPECT_EQ(codes.size(), table.size()) << "one code per class";
  for (int old : {kEdgeFound, kUsageError, kInputError, kAuditFound, kNotOneJob})
    EXPECT_EQ(codes.count(old), 0u) << old;
}

// What the report settles alone needs no replay: no fault, the origin outside attention, an
// origin that was not checked, nothing checked.
TEST(RunVerdict, TheReportAloneSettlesWhatNeedsNoReplay) {
  Report clean{.run = facts()};
  EXPECT_FALSE(replayTargetOf(clean));
  RunVerdict v = verdictOf(clean, std::nullopt);
  EXPECT_EQ(v.cls, VerdictClass::kNoFault);
  EXPECT_EQ(verdictJson(v)["rank"], nullptr);
  EXPECT_EQ(verdictJson(v)["device_identity"], nullptr);

  Report partial{.run = facts()};
  partial.conclusion.outcome = Outcome::kPartial;
  EXPECT_EQ(verdictOf(partial, std::nullopt).cls, VerdictClass::kNoFault);

  Report nothing{.run = facts(0, 0)};
  nothing.conclusion.outcome = Outcome::kNothingChecked;
  nothing.conclusion.nothing_checked_why = "no Python process imported torch";
  v = verdictOf(nothing, std::nullopt);
  EXPECT_EQ(v.cls, VerdictClass::kNothingChecked);
  EXPECT_NE(v.explanation.find("no Python process imported torch"), std::string::npos) << v.explanation;

  // The gradients went non-finite before any attention edge, attention all checked.
  Report outside{.run = facts()};
  outside.run.ranks[0].device = DeviceIdentity{.host = "node3", .device = "cpu"};
  outside.conclusion.outcome = Outcome::kOutsideAttention;
  outside.conclusion.sentinel_first = true;
  outside.conclusion.sentinel = SentinelFinding{.rank = 0, .step = 2, .gradients = {"head.weight"}};
  EXPECT_FALSE(replayTargetOf(outside));
  v = verdictOf(outside, std::nullopt);
  EXPECT_EQ(v.cls, VerdictClass::kDataOrModel);
  EXPECT_EQ(v.reason, "outside-attention");
  json doc = verdictJson(v);
  EXPECT_EQ(doc["rank"], 0);
  EXPECT_EQ(doc["step"], 2);
  EXPECT_EQ(doc["call"], nullptr);
  EXPECT_EQ(doc["device_identity"]["host"], "node3");
  EXPECT_EQ(doc["exit_code"], 13);

  // Values that reached attention from upstream: outside attention, named at the first edge.
  Report upstream = gpuEdge();
  upstream.origin = Origin::kUpstream;
  upstream.first_source_edge.reset();
  EXPECT_FALSE(replayTargetOf(upstream));
  v = verdictOf(upstream, std::nullopt);
  EXPECT_EQ(v.cls, VerdictClass::kDataOrModel);
  EXPECT_EQ(v.call, "rank0:layer0:call6");

  // Attention ran unchecked by then: nanprov cannot tell who made them, and does not guess.
  upstream.conclusion.outcome = Outcome::kUnattributed;
  v = verdictOf(upstream, std::nullopt);
  EXPECT_EQ(v.cls, VerdictClass::kUndetermined);
  EXPECT_EQ(v.reason, "unattributed");
}

// An edge attention made is classified by replay of its capture; without a capture, or when
// replay gave no answer, it is undetermined and says why.
TEST(RunVerdict, AnEdgeAttentionMadeIsClassifiedByItsReplay) {
  Report r = gpuEdge();
  ASSERT_TRUE(replayTargetOf(r));
  EXPECT_EQ(replayTargetOf(r)->capture, "runs/edge/captures/rank0-layer0-call6-fwd-seq12.safetensors");

  RunVerdict v = verdictOf(r, replayFailed("the replay engine exited 3 without its JSON"));
  EXPECT_EQ(v.cls, VerdictClass::kUndetermined);
  EXPECT_EQ(v.reason, "replay-failed");
  EXPECT_NE(v.explanation.find("exited 3"), std::string::npos) << v.explanation;
  EXPECT_EQ(verdictOf(r, replayAnswerOf(json::parse("[1]"))).reason, "replay-failed") << "not replay's JSON";

  r.first_source_edge->capture = EdgeCapture{.skipped = "over --capture-bytes"};
  EXPECT_EQ(replayTargetOf(r)->capture, "");
  v = verdictOf(r, std::nullopt);
  EXPECT_EQ(v.cls, VerdictClass::kUndetermined);
  EXPECT_EQ(v.reason, "not-captured");
  EXPECT_NE(v.explanation.find("over --capture-bytes"), std::string::npos) << v.explanation;
}

// With no edge, the audit's first finding is what is replayed and placed.
TEST(RunVerdict, AnAuditFindingIsReplayedWhenThereIsNoEdge) {
  Report r{.run = facts()};
  r.run.ranks[0].device = kGpu;
  r.conclusion.outcome = Outcome::kAuditFinding;
  r.conclusion.audit.findings.push_back(AuditFinding{.rank = 0,
                                                     .name = "rank0:layer1:call3",
                                                     .step = 4,
                                                     .phase = "fwd",
                                                     .op = "aten::_scaled_dot_product_cudnn_attention",
                                                     .backend = "cudnn",
                                                     .capture = "runs/edge/captures/audit.safetensors"});
  ASSERT_TRUE(replayTargetOf(r));
  EXPECT_EQ(replayTargetOf(r)->capture, "runs/edge/captures/audit.safetensors");
  RunVerdict v = verdictOf(r, replayAnswerOf(replayJson("backend-specific")));
  EXPECT_EQ(v.cls, VerdictClass::kKernel);
  EXPECT_EQ(v.call, "rank0:layer1:call3");
  EXPECT_EQ(v.device.gpu_uuid, kGpu.gpu_uuid);
}

// The one JSON object a launcher reads: every field there, the device identity beside the call,
// replay's root cause and reruns passed on.
TEST(RunVerdict, TheJsonCarriesTheVerdictTheCallAndTheDevice) {
  RunVerdict v = verdictOf(gpuEdge(), replayAnswerOf(replayJson("not-reproduced")));
  const json doc = verdictJson(v);
  EXPECT_EQ(doc["verdict"], "suspect_device");
  EXPECT_EQ(doc["exit_code"], 12);
  EXPECT_EQ(doc["action"], "exclude_node");
  EXPECT_EQ(doc["reason"], "not-reproduced");
  EXPECT_EQ(doc["outcome"], "edge");
  EXPECT_EQ(doc["rank"], 0);
  EXPECT_EQ(doc["step"], 3);
  EXPECT_EQ(doc["call"], "rank0:layer0:call6");
  EXPECT_EQ(doc["phase"], "fwd");
  EXPECT_EQ(doc["injected"], false);
  EXPECT_EQ(doc["capture"], "runs/edge/captures/rank0-layer0-call6-fwd-seq12.safetensors");
  EXPECT_EQ(doc["device_identity"], json({{"host", "node17"},
                                          {"device", "cuda:0"},
                                          {"gpu", "NVIDIA H200 (sm_90)"},
                                          {"gpu_uuid", "GPU-5e2c1f0a-1b2c-3d4e-5f60-718293a4b5c6"},
                                          {"pci_bus_id", "00000000:19:00.0"},
                                          {"driver", "580.65.06"},
                                          {"cuda_driver", "13.0"},
                                          {"cudnn", "91900"}}));
  EXPECT_EQ(doc["root_cause"]["class"], "not-reproduced");
  EXPECT_EQ(doc["root_cause"]["backend"], "cudnn");
  EXPECT_EQ(doc["root_cause"]["kernel"], nullptr);
  EXPECT_EQ(doc["reruns"]["runs"], 5);
  EXPECT_EQ(doc["suspects"], json::array({{{"rank", 0}, {"device_identity", doc["device_identity"]}}}));
  const std::string line = verdictLine(v);
  EXPECT_EQ(line.rfind("suspect_device (exit 12, exclude_node): rank0:layer0:call6, step 3, on host node17, cuda:0", 0),
            0u)
      << line;
  EXPECT_NE(line.find("GPU-5e2c1f0a"), std::string::npos) << line;
}

// An injected fault is never recomputed from its inputs either, but it is a drill: never a reason
// to exclude a node. The verdict is undetermined, says it was injected, and asks for a look.
TEST(RunVerdict, AnInjectedFaultIsSaidToBeInjected) {
  Report r = gpuEdge();
  r.first_edge->call.injected = "O";
  r.first_source_edge->call.injected = "O";
  RunVerdict v = verdictOf(r, replayAnswerOf(replayJson("not-reproduced", "O")));
  EXPECT_EQ(v.cls, VerdictClass::kUndetermined);
  EXPECT_EQ(v.reason, "injected");
  EXPECT_EQ(verdictJson(v)["action"], "inspect");
  EXPECT_TRUE(v.injected);
  EXPECT_TRUE(verdictJson(v)["injected"]);
  EXPECT_EQ(verdictJson(v)["suspects"], json::array()) << "a drill excludes no node";
  EXPECT_NE(v.explanation.find("injected"), std::string::npos) << v.explanation;
}

// Replicas that diverged, all values finite: a suspected device, from the report alone (nothing to
// replay). With a majority the rank and its device are named; with two replicas neither is, and
// both are suspects, each with its device: the scheduler excludes both nodes.
TEST(RunVerdict, AReplicaDivergenceSuspectsTheDeviceOfTheRankThatDiverged) {
  Report r{.run = facts()};
  r.run.ranks[0].device = kGpu;
  r.conclusion.outcome = Outcome::kReplicaDivergence;
  r.conclusion.replicas.checked = true;
  r.conclusion.replicas.first_divergence =
      ReplicaDivergence{.step = 4, .ranks = {0}, .by_majority = true, .parameter = "head.weight"};
  EXPECT_FALSE(replayTargetOf(r));
  RunVerdict v = verdictOf(r, std::nullopt);
  EXPECT_EQ(v.cls, VerdictClass::kSuspectDevice);
  EXPECT_EQ(verdictExitCode(v.cls), 12);
  EXPECT_EQ(v.reason, "replica-divergence");
  EXPECT_EQ(v.rank, 0);
  EXPECT_EQ(v.step, 4);
  EXPECT_EQ(v.device.gpu_uuid, kGpu.gpu_uuid);
  EXPECT_NE(v.explanation.find("rank 0's parameters differ from its replicas' after step 4, first in head.weight"),
            std::string::npos)
      << v.explanation;

  r.conclusion.replicas.first_divergence = ReplicaDivergence{.step = 4, .ranks = {0, 1}, .parameter = "head.weight"};
  v = verdictOf(r, std::nullopt);
  EXPECT_EQ(v.cls, VerdictClass::kSuspectDevice);
  EXPECT_FALSE(v.rank);
  EXPECT_EQ(v.step, 4);
  EXPECT_NE(v.explanation.find("ranks 0 and 1"), std::string::npos) << v.explanation;
  const json suspects = verdictJson(v)["suspects"];
  ASSERT_EQ(suspects.size(), 2u) << suspects.dump();
  EXPECT_EQ(suspects[0]["rank"], 0);
  EXPECT_EQ(suspects[0]["device_identity"]["gpu_uuid"], kGpu.gpu_uuid);
  EXPECT_EQ(suspects[1]["rank"], 1);
  const std::string line = verdictLine(v);
  EXPECT_EQ(line.rfind("suspect_device (exit 12, exclude_node): rank 0 on host node17, cuda:0", 0), 0u) << line;
  EXPECT_NE(line.find("; rank 1"), std::string::npos) << line;
}

}  // namespace
}  // namespace nanprov::report
