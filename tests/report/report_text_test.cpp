#include "report/report_text.h"

#include <gtest/gtest.h>

#include "tests/report/synthetic_report.h"

namespace nanprov::report {
namespace {

using synthetic::edgeReport;
using synthetic::facts;

std::string firstLineOf(const std::string& text) { return text.substr(0, text.find('\n')); }

// The text renders the model alone: the edge, where its large inputs came from, its capture, what
// followed, and the run's size last.
TEST(ReportText, NamesTheEdgeAndWhatTheModelSaysOfIt) {
  const std::string text = reportText(edgeReport());
  EXPECT_EQ(firstLineOf(text), "rank0:layer0:call6  first non-finite edge: finite inputs, non-finite O");
  EXPECT_NE(
      text.find(
          "\n  step 3, fwd, aten::_scaled_dot_product_flash_attention_for_cpu (flash_cpu), module layers.0.attn\n"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("\n  output O: 2048 NaN of 1024\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\n  finite inputs Q K V (largest |x| 9.3e+19)\n    it is the step's first attention call"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\n  captured: nanprov replay runs/edge/captures/rank0-layer0-call6-fwd-seq12.safetensors\n"),
            std::string::npos);
  EXPECT_NE(text.find("\n  after it: 12 non-finite calls across 2 layers on 1 rank\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\n  gradients went non-finite at step 3: embed.weight\n"), std::string::npos) << text;
  EXPECT_NE(text.rfind("\n  run runs/edge: 1 rank, 24 attention calls checked, 6 optimizer steps\n"), std::string::npos)
      << text;
}

// The node and GPU beside the edge, so that "this node" can be acted on; a host name from the
// store is escaped like any of its texts. A later source edge on another node names its own.
TEST(ReportText, NamesTheDeviceBesideTheEdge) {
  Report r = edgeReport();
  r.first_edge->device = DeviceIdentity{.host = "node17\x1b[2J",
                                        .device = "cuda:0",
                                        .gpu_uuid = "GPU-5e2c1f0a-1b2c-3d4e-5f60-718293a4b5c6",
                                        .pci_bus_id = "00000000:19:00.0",
                                        .driver = "580.65.06",
                                        .cudnn = "91900"};
  std::string text = reportText(r);
  EXPECT_NE(
      text.find("module layers.0.attn\n  on host node17\\x1b[2J, cuda:0, GPU-5e2c1f0a-1b2c-3d4e-5f60-718293a4b5c6, PCI "
                "00000000:19:00.0, driver 580.65.06, cuDNN 91900\n"),
      std::string::npos)
      << text;
  EXPECT_EQ(text.find('\x1b'), std::string::npos);

  r.origin = Origin::kUpstream;
  r.first_source_edge->call.seq = 40;
  r.first_source_edge->device = DeviceIdentity{.host = "node18", .device = "cpu"};
  text = reportText(r);
  EXPECT_NE(text.find("first source edge inside attention came later: rank0:layer0:call6, on host node18, cpu\n"),
            std::string::npos)
      << text;
  r.first_source_edge->device = r.first_edge->device;
  text = reportText(r);
  EXPECT_NE(text.find("first source edge inside attention came later: rank0:layer0:call6\n"), std::string::npos)
      << "the same node is not said twice: " << text;

  EXPECT_EQ(reportText(edgeReport()).find("  on "), std::string::npos) << "nothing known, nothing said";
}

// A store may say anything: a module name holding a newline or a terminal escape cannot forge a
// line or rewrite the screen.
TEST(ReportText, TextsFromTheStoreAreEscaped) {
  Report r = edgeReport();
  r.first_edge->call.module = "layers.0\nrank9:layer9:call9  clean\x1b[2J";
  r.first_edge->mesh = "dp=0\n";
  const std::string text = reportText(r);
  EXPECT_NE(text.find("module layers.0\\nrank9:layer9:call9  clean\\x1b[2J, mesh dp=0\\n\n"), std::string::npos)
      << text;
  EXPECT_EQ(text.find('\x1b'), std::string::npos);
}

TEST(ReportText, EachOutcomeHasItsHeadline) {
  Report clean{.run = facts()};
  EXPECT_EQ(
      firstLineOf(reportText(clean)),
      "clean: every checked attention input and output was finite, and so were the gradients at every optimizer step");
  Report partial{.run = facts()};
  partial.conclusion.outcome = Outcome::kPartial;
  partial.run.unchecked = {UncheckedAttention{.what = "flex_attention", .kind = "flex_attention", .count = 12}};
  const std::string partial_text = reportText(partial);
  EXPECT_EQ(firstLineOf(partial_text).rfind("no fault in what was checked, but not everything was: ", 0), 0u);
  EXPECT_NE(partial_text.find("\n  attention not checked: flex_attention x12\n"), std::string::npos) << partial_text;
  Report nothing{.run = facts(0, 0)};
  nothing.conclusion.outcome = Outcome::kNothingChecked;
  nothing.conclusion.nothing_checked_why = "no Python process imported torch";
  EXPECT_EQ(
      reportText(nothing).rfind("nothing checked: no attention call was probed, so nanprov cannot call this run clean\n"
                                "  why: no Python process imported torch\n",
                                0),
      0u);
  Report sentinel{.run = facts()};
  sentinel.conclusion.outcome = Outcome::kOutsideAttention;
  sentinel.conclusion.sentinel_first = true;
  sentinel.conclusion.sentinel =
      SentinelFinding{.rank = 0, .step = 2, .gradients = {"a", "b", "c", "d", "e", "f", "g"}};
  const std::string sentinel_text = reportText(sentinel);
  EXPECT_EQ(firstLineOf(sentinel_text),
            "rank0:step 2  first non-finite values found were gradients, at step 2: no probed "
            "attention call made them; the origin is outside attention")
      << "without --trail the forward outside attention was not checked: the gradients are only the first found";
  EXPECT_NE(sentinel_text.find("  non-finite gradients: a, b, c, d, e and 2 more\n"), std::string::npos)
      << sentinel_text;
  EXPECT_NE(sentinel_text.find("  nanprov run --trail names the module that made them\n"), std::string::npos);
  // No attention call checked: it cannot tell, says how to check attention it did not see, and
  // never says "outside attention" beside "no attention call was checked".
  Report unseen{.run = facts(0)};
  unseen.conclusion = sentinel.conclusion;
  unseen.conclusion.outcome = Outcome::kUnattributed;
  const std::string unseen_text = reportText(unseen);
  EXPECT_EQ(firstLineOf(unseen_text),
            "rank0:step 2  first non-finite values found were gradients, at step 2, but no "
            "attention call was checked, so nanprov cannot tell whether attention made them")
      << "without --trail the gradients are only the first found";
  EXPECT_NE(unseen_text.find("\n  " + std::string(kUnseenAttentionHint) + "\n"), std::string::npos) << unseen_text;
  EXPECT_NE(unseen_text.find("no attention call was checked\n"), std::string::npos) << unseen_text;
  EXPECT_EQ(unseen_text.find("outside attention"), std::string::npos) << unseen_text;
  // --trail saw the forward go non-finite at the sentinel's step: the headline names the forward
  // (issue 61); a trail whose first module is a backward one names the gradients.
  Report forward = sentinel;
  forward.run.trail_on = true;
  forward.first_module =
      FirstModule{.check = ModuleCheckRecord{
                      .rank = 0, .step = 2, .phase = Phase::kForward, .module = "head.fc", .module_class = "Linear"}};
  EXPECT_EQ(firstLineOf(reportText(forward)),
            "rank0:step 2  first non-finite values were in the forward, at step 2: no "
            "probed attention call made them; the origin is outside attention");
  Report backward = forward;
  backward.first_module->check.phase = Phase::kBackward;
  EXPECT_EQ(
      firstLineOf(reportText(backward)).rfind("rank0:step 2  first non-finite values were gradients, at step 2: ", 0),
      0u);
  Report audit{.run = facts()};
  audit.conclusion.outcome = Outcome::kAuditFinding;
  audit.conclusion.audit.on = true;
  audit.conclusion.audit.findings = {AuditFinding{.name = "rank0:layer1:call5", .verdict = "silent-wrong"}};
  EXPECT_EQ(
      firstLineOf(reportText(audit)),
      "rank0:layer1:call5  audit finding: finite outputs that are silent-wrong against the float64 reference (no value "
      "was non-finite)");
  Report replicas{.run = facts()};
  replicas.conclusion.outcome = Outcome::kReplicaDivergence;
  replicas.conclusion.replicas = ReplicaCheck{.checked = true, .ranks = {0, 1, 2}, .steps = 6};
  replicas.conclusion.replicas.first_divergence =
      ReplicaDivergence{.step = 4, .ranks = {1}, .by_majority = true, .parameter = "head.weight"};
  const std::string text = reportText(replicas);
  EXPECT_EQ(firstLineOf(text),
            "replicas diverged at step 4: rank 1's parameters differ from its replicas', first in head.weight; "
            "every value stayed finite: suspect rank 1's device");
  EXPECT_NE(
      text.find("\n  replicas: ranks 0, 1, 2 compared after each of 6 steps: diverged at step 4 (rank 1, first in "
                "head.weight)\n"),
      std::string::npos)
      << text;
  replicas.conclusion.replicas.ranks = {0, 1};
  replicas.conclusion.replicas.first_divergence->ranks = {0, 1};
  replicas.conclusion.replicas.first_divergence->by_majority = false;
  EXPECT_EQ(firstLineOf(reportText(replicas)),
            "replicas diverged at step 4: ranks 0 and 1 hold different parameters, first in head.weight; every value "
            "stayed finite, "
            "and no majority tells which rank is wrong: suspect the devices of ranks 0 and 1");
}

TEST(ReportText, TheSummarySaysTheRunsSizeAndWhatItLost) {
  RunOverview run = facts();
  run.step_unit = StepUnit::kForwardPass;
  run.calls_not_stored = 3;
  run.damage = {"rank 0's tally is below its store"};
  run.summarised = Summarised{.calls = 100, .first_step = 10, .last_step = 19, .every = 2, .ranks = 1};
  EXPECT_EQ(summaryLine(run),
            "run runs/edge: 1 rank, 24 attention calls checked, 7 forward passes\n"
            "  the last 3 calls were not stored: the process ended before they reached the store (killed, or it exited "
            "by a path "
            "that runs no exit hook)\n"
            "  summarised: 100 clean calls of steps 10-19 kept only as counts and max |x| per (step, layer, phase), up "
            "to 2 steps "
            "a row (nanprov run --store-budget); every call that was not clean is kept in full\n"
            "  damaged: rank 0's tally is below its store");
  EXPECT_EQ(summarisedText(Summarised{}), "");
}

TEST(ReportText, MaskedRowsAreCountedInQueryRows) {
  CallRecord c = synthetic::forward(0, 0, 0, 0);
  TensorHealth mask = synthetic::tensor(Role::kMask);
  mask.shape = *TensorShape::parse("[2,1,16,16]");
  mask.numel = 512;
  mask.masked_rows = 4;
  c.tensors.push_back(mask);
  EXPECT_EQ(maskedRowsText(c, mask), "16 " + std::string(kMaskedRowsUnit))
      << "each mask row stands for the 4 heads' rows";
}

}  // namespace
}  // namespace nanprov::report
