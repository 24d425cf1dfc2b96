#include "report/outcome.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/report/synthetic_run.h"
#include "tests/temp_dir.h"

namespace nanprov::report {
namespace {

namespace fs = std::filesystem;
using synthetic::forward;
using synthetic::runOf;
using synthetic::upstream;

TEST(Outcome, CleanIsCheckedAndFiniteAndAnEdgeIsAFault) {
  store::RunData clean = runOf({forward(0, 0, 0, 0)});
  EXPECT_EQ(conclude(clean, analyze(clean), std::nullopt).outcome, Outcome::kClean);
  store::RunData edge = runOf({forward(0, 0, 0, 0, /*o_nan=*/2)});
  const Conclusion c = conclude(edge, analyze(edge), std::nullopt);
  EXPECT_EQ(c.outcome, Outcome::kEdgeFound);
  EXPECT_TRUE(outcomeIsFault(c.outcome));
  EXPECT_FALSE(outcomeIsFault(Outcome::kClean));
  EXPECT_STREQ(outcomeName(Outcome::kOutsideAttention), "outside_attention");
  EXPECT_STREQ(outcomeName(Outcome::kNothingChecked), "nothing_checked");
}

// Replicas that diverged while every value stayed finite: never clean. Beside a non-finite edge the
// edge is the answer, and the divergence is still listed.
TEST(Outcome, ReplicasThatDivergedAreAFaultUnlessSomethingWentNonFinite) {
  store::RunData run = runOf({forward(0, 0, 0, 0)});
  store::RankInfo other = run.ranks[0];
  other.rank = 1;
  run.ranks.push_back(other);
  for (store::RankInfo& r : run.ranks) r.meta[kReplicaGroupMeta] = "0,1";
  run.ranks[0].meta["world_size"] = run.ranks[1].meta["world_size"] = "2";
  for (int rank : {0, 1}) {
    for (int64_t step : {0, 1}) {
      run.replica_digests.push_back(ReplicaDigestRecord{
          .rank = rank, .step = step, .parameter = "head.weight", .digest = step == 1 && rank == 1 ? 9 : 5});
    }
  }
  const Conclusion c = conclude(run, analyze(run), std::nullopt);
  EXPECT_EQ(c.outcome, Outcome::kReplicaDivergence);
  EXPECT_TRUE(outcomeIsFault(c.outcome));
  EXPECT_STREQ(outcomeName(c.outcome), "replica_divergence");
  ASSERT_TRUE(c.replicas.first_divergence);
  EXPECT_EQ(c.replicas.first_divergence->step, 1);
  store::RunData edge = runOf({forward(0, 0, 0, 0, /*o_nan=*/2)});
  edge.ranks = run.ranks;
  edge.replica_digests = run.replica_digests;
  const Conclusion e = conclude(edge, analyze(edge), std::nullopt);
  EXPECT_EQ(e.outcome, Outcome::kEdgeFound);
  EXPECT_TRUE(e.replicas.first_divergence);
}

// Gradients that went non-finite before any attention edge are the answer; with no attention
// unchecked and every rank read, the origin is outside attention.
TEST(Outcome, TheSentinelWinsWhenItsStepComesFirst) {
  store::RunData run = runOf({upstream(0, 0, 3, 0)});
  run.sentinel = {SentinelRecord{.rank = 0, .step = 1, .tensor = SentinelTensor::kGrad, .parameter = "embed.weight"},
                  SentinelRecord{.rank = 0, .step = 1, .tensor = SentinelTensor::kParam, .parameter = "embed.weight"}};
  const Conclusion c = conclude(run, analyze(run), std::nullopt);
  EXPECT_TRUE(c.sentinel_first);
  EXPECT_EQ(c.outcome, Outcome::kOutsideAttention);
  ASSERT_TRUE(c.sentinel);
  EXPECT_EQ(c.sentinel->gradients, std::vector<std::string>{"embed.weight"});
  EXPECT_EQ(c.sentinel->values, std::vector<std::string>{"embed.weight"});
  // A rank of the job not read may have made them: unattributed, never outside attention.
  run.ranks[0].meta["world_size"] = "2";
  const Conclusion partial = conclude(run, analyze(run), std::nullopt);
  EXPECT_EQ(partial.outcome, Outcome::kUnattributed);
  ASSERT_EQ(partial.unchecked_by_sentinel_step.size(), 1u);
  EXPECT_EQ(partial.unchecked_by_sentinel_step[0], "the attention of rank 1 (its store was not read)");
}

// With no attention call checked, "outside attention" would rest on nothing (attention nanprov
// did not recognise may have made them): unattributed, even where --trail named a module outside
// attention, and the text never says both "outside attention" and "no attention call was checked".
TEST(Outcome, OutsideAttentionNeedsAttentionChecked) {
  store::RunData run = runOf({});
  run.sentinel = {SentinelRecord{.rank = 0, .step = 1, .tensor = SentinelTensor::kGrad, .parameter = "embed.weight"}};
  EXPECT_EQ(conclude(run, analyze(run), std::nullopt).outcome, Outcome::kUnattributed);
  ModuleCheckRecord m;
  m.step = 1, m.module = "blocks.0.mlp", m.module_class = "Linear", m.posinf = 1;
  EXPECT_EQ(conclude(run, analyze(run), FirstModule{.check = m}).outcome, Outcome::kUnattributed);
  run.total_calls = 8;  // checked on a rank whose calls were not loaded: attention was checked
  EXPECT_EQ(conclude(run, analyze(run), std::nullopt).outcome, Outcome::kOutsideAttention);
}

// At one step, the rank that received the values through a collective comes after the rank that
// sent them.
TEST(Outcome, TheEarliestSentinelPrefersTheRankThatSentThem) {
  store::RunData run;
  run.sentinel = {SentinelRecord{.rank = 0, .step = 4, .parameter = "w"},
                  SentinelRecord{.rank = 1, .step = 4, .parameter = "w"},
                  SentinelRecord{.rank = 2, .step = 6, .parameter = "w"}};
  EXPECT_EQ(earliestSentinel(run, {})->rank, 0);
  EXPECT_EQ(earliestSentinel(run, {{0, 4}})->rank, 1);
  EXPECT_FALSE(earliestSentinel(store::RunData{}, {}));
}

// Nothing checked says why, from what `nanprov run` and the bootstrap left (run.json, processes/).
TEST(Outcome, NothingCheckedSaysWhy) {
  const fs::path dir = testing::freshDir("outcome-nothing");
  store::RunData run = runOf({}, 0, dir.string());
  run.ranks.clear();
  run.settings.readable = true;
  run.settings.signal = "SIGKILL";
  Conclusion c = conclude(run, analyze(run), std::nullopt);
  EXPECT_EQ(c.outcome, Outcome::kNothingChecked);
  EXPECT_EQ(c.nothing_checked_why, "the training was killed by SIGKILL before any attention call");
  run.settings = store::RunFile{};
  EXPECT_EQ(conclude(run, analyze(run), std::nullopt).nothing_checked_why, "no Python process imported torch");
  fs::create_directories(dir / "processes");
  std::ofstream(dir / "processes" / "7.json") << R"({"pid": 7, "status": "no_probes", "detail": "torch 2.9"})";
  EXPECT_EQ(conclude(run, analyze(run), std::nullopt).nothing_checked_why,
            "no process was instrumented (see " + (dir / "processes").string() + ")");
}

// Attention recognised and not checked, with nothing non-finite: no fault, but partial.
TEST(Outcome, UncheckedAttentionMakesACleanRunPartial) {
  store::RunData run = runOf({forward(0, 0, 0, 0)});
  run.ranks[0].counters.unprobed["flex_attention"] = 3;
  const Conclusion c = conclude(run, analyze(run), std::nullopt);
  EXPECT_EQ(c.outcome, Outcome::kPartial);
  EXPECT_EQ(c.unprobed.at("flex_attention"), 3);
}

// --audit vouches only for what it judged: a regime of conditions seen and never judged leaves a
// run without a fault partial.
TEST(Outcome, ARegimeTheAuditNeverJudgedMakesACleanRunPartial) {
  store::RunData run = runOf({forward(0, 0, 0, 0)});
  run.settings.audit.on = true;
  EXPECT_EQ(conclude(run, analyze(run), std::nullopt).outcome, Outcome::kClean) << "no regime counted";
  run.ranks[0].counters.audit_regimes["k0.r0"] = AuditRegime{
      .layer = 0, .first_seen = 3, .last_seen = 3, .calls = 1, .last_judged = -1, .conditions = "mask |x| 3e+04"};
  const Conclusion c = conclude(run, analyze(run), std::nullopt);
  EXPECT_EQ(c.outcome, Outcome::kPartial);
  EXPECT_EQ(c.audit.coverage.regimes_seen, 1);
  EXPECT_EQ(c.audit.coverage.regimes_judged, 0);
}

}  // namespace
}  // namespace nanprov::report
