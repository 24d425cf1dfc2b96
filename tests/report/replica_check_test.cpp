#include "report/replica_check.h"

#include <gtest/gtest.h>

#include <map>
#include <utility>

#include "store/reader.h"
#include "store/replica_digest_rows.h"

namespace nanprov::report {
namespace {

const std::vector<std::string> kParameters = {"embed.weight", "layers.0.attn.q_proj.weight", "head.weight"};

// `ranks` DDP replicas over one group, each with `steps` steps of equal digests.
store::RunData replicas(int ranks, int64_t steps) {
  store::RunData run;
  std::string group;
  for (int r = 0; r < ranks; ++r) group += (r ? "," : "") + std::to_string(r);
  for (int r = 0; r < ranks; ++r) {
    store::RankInfo info;
    info.rank = r;
    info.meta = {{"world_size", std::to_string(ranks)}, {kReplicaGroupMeta, group}};
    run.ranks.push_back(info);
    for (int64_t step = 0; step < steps; ++step) {
      for (size_t p = 0; p < kParameters.size(); ++p) {
        run.replica_digests.push_back(ReplicaDigestRecord{
            .rank = r, .step = step, .parameter = kParameters[p], .digest = 1000 * step + static_cast<int64_t>(p)});
      }
    }
  }
  return run;
}

// Changes `rank`'s digest of `parameter` from `step` on (a divergence persists: the values differ).
void diverge(store::RunData& run, int rank, int64_t step, const std::string& parameter) {
  for (ReplicaDigestRecord& d : run.replica_digests) {
    if (d.rank == rank && d.step >= step && d.parameter == parameter) d.digest += 7;
  }
}

TEST(ReplicaCheck, EqualReplicasAreCheckedWithoutADivergence) {
  const ReplicaCheck r = checkReplicas(replicas(3, 5));
  EXPECT_TRUE(r.checked);
  EXPECT_EQ(r.ranks, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(r.steps, 5);
  EXPECT_FALSE(r.first_divergence);
  EXPECT_EQ(replicaCheckText(r, StepUnit::kOptimizerStep),
            "ranks 0, 1, 2 compared after each of 5 steps: bit for bit equal");
}

// Three replicas: the majority names the one rank that went its own way, and the first parameter
// in the model's order that differs, though later steps differ in more.
TEST(ReplicaCheck, TheMajorityNamesTheRankThatDiverged) {
  for (int rank : {0, 1, 2}) {
    store::RunData run = replicas(3, 6);
    diverge(run, rank, 4, "layers.0.attn.q_proj.weight");
    diverge(run, rank, 5, "embed.weight");
    const ReplicaCheck r = checkReplicas(run);
    ASSERT_TRUE(r.first_divergence) << rank;
    EXPECT_EQ(r.first_divergence->step, 4);
    EXPECT_EQ(r.first_divergence->ranks, std::vector<int>{rank});
    EXPECT_TRUE(r.first_divergence->by_majority);
    EXPECT_EQ(r.first_divergence->parameter, "layers.0.attn.q_proj.weight");
  }
}

// Two replicas that disagree: nothing tells which is wrong, so both are named.
TEST(ReplicaCheck, TwoReplicasThatDisagreeAreBothNamed) {
  store::RunData run = replicas(2, 6);
  diverge(run, 1, 3, "head.weight");
  const ReplicaCheck r = checkReplicas(run);
  ASSERT_TRUE(r.first_divergence);
  EXPECT_EQ(r.first_divergence->step, 3);
  EXPECT_EQ(r.first_divergence->ranks, (std::vector<int>{0, 1}));
  EXPECT_FALSE(r.first_divergence->by_majority);
  EXPECT_EQ(r.first_divergence->parameter, "head.weight");
  EXPECT_EQ(replicaCheckText(r, StepUnit::kOptimizerStep),
            "ranks 0 and 1 compared after each of 6 steps: diverged at step 3 (ranks 0 and 1, first in head.weight)");
}

// A rank that died after step 2 is compared while it recorded; the two left go on being compared,
// and a divergence after its death is found between them, where no majority tells which one is
// wrong: both are named.
TEST(ReplicaCheck, ARankThatDiedIsComparedWhileItRecorded) {
  store::RunData run = replicas(3, 6);
  std::erase_if(run.replica_digests, [](const ReplicaDigestRecord& d) { return d.rank == 2 && d.step > 2; });
  EXPECT_FALSE(checkReplicas(run).first_divergence) << "missing steps are no divergence";
  EXPECT_EQ(checkReplicas(run).steps, 6);
  diverge(run, 0, 4, "head.weight");
  const ReplicaCheck r = checkReplicas(run);
  ASSERT_TRUE(r.first_divergence);
  EXPECT_EQ(r.first_divergence->step, 4);
  EXPECT_EQ(r.first_divergence->ranks, (std::vector<int>{0, 1}));
}

// A rank that recorded fewer parameters in a step (its rows cut short) is compared on those it has.
TEST(ReplicaCheck, ARankWithFewerRowsIsComparedOnWhatItHas) {
  store::RunData run = replicas(3, 3);
  std::erase_if(run.replica_digests, [](const ReplicaDigestRecord& d) {
    return d.rank == 1 && d.step == 2 && d.parameter == "head.weight";
  });
  EXPECT_FALSE(checkReplicas(run).first_divergence);
  diverge(run, 1, 2, "embed.weight");
  const ReplicaCheck r = checkReplicas(run);
  ASSERT_TRUE(r.first_divergence);
  EXPECT_EQ(r.first_divergence->ranks, std::vector<int>{1});
  EXPECT_EQ(r.first_divergence->parameter, "embed.weight");
}

// Only ranks that name each other as replicas are compared: two DDP groups (as in HSDP's
// replicate groups) are compared apart, and a rank whose group does not list it is left out.
TEST(ReplicaCheck, OnlyRanksOfOneGroupAreCompared) {
  store::RunData run = replicas(4, 3);
  run.ranks[0].meta[kReplicaGroupMeta] = run.ranks[2].meta[kReplicaGroupMeta] = "0,2";
  run.ranks[1].meta[kReplicaGroupMeta] = run.ranks[3].meta[kReplicaGroupMeta] = "1,3";
  diverge(run, 1, 0, "embed.weight");  // ranks 1 and 3 differ from 0 and 2, which is no divergence by itself
  diverge(run, 3, 0, "embed.weight");
  EXPECT_FALSE(checkReplicas(run).first_divergence);
  run.ranks[3].meta[kReplicaGroupMeta] = "0,1,2";  // does not list itself: never compared
  diverge(run, 3, 1, "head.weight");
  const ReplicaCheck r = checkReplicas(run);
  EXPECT_FALSE(r.first_divergence);
  EXPECT_EQ(r.ranks, (std::vector<int>{0, 2}));
  run.ranks[2].meta[kReplicaGroupMeta] = "0,two";  // damaged: read as no group, never bent into one
  EXPECT_FALSE(checkReplicas(run).checked);
}

// HSDP: each shard has its own replica group (ranks 0 and 2 hold one shard, 1 and 3 the other).
// A step compared in both groups is one step, and the text names the groups.
TEST(ReplicaCheck, TwoReplicaGroupsCountEachStepOnceAndAreNamed) {
  store::RunData run = replicas(4, 3);
  run.ranks[0].meta[kReplicaGroupMeta] = run.ranks[2].meta[kReplicaGroupMeta] = "0,2";
  run.ranks[1].meta[kReplicaGroupMeta] = run.ranks[3].meta[kReplicaGroupMeta] = "1,3";
  diverge(run, 1, 0, "embed.weight");  // shards differ between groups: no divergence
  diverge(run, 3, 0, "embed.weight");
  ReplicaCheck r = checkReplicas(run);
  EXPECT_EQ(r.steps, 3);
  EXPECT_EQ(r.groups, (std::vector<std::vector<int>>{{0, 2}, {1, 3}}));
  EXPECT_EQ(replicaCheckText(r, StepUnit::kOptimizerStep),
            "ranks 0, 1, 2, 3 (replica groups 0 and 2; 1 and 3) compared after each of 3 steps: bit for bit equal");
  diverge(run, 2, 1, "head.weight");
  r = checkReplicas(run);
  ASSERT_TRUE(r.first_divergence);
  EXPECT_EQ(r.first_divergence->step, 1);
  EXPECT_EQ(r.first_divergence->ranks, (std::vector<int>{0, 2}));
  EXPECT_EQ(r.first_divergence->parameter, "head.weight");
}

TEST(ReplicaCheck, ShardedParametersAreNotCompared) {
  store::RunData run;
  for (int r = 0; r < 2; ++r) {
    store::RankInfo info;
    info.rank = r;
    info.meta = {{kReplicaShardedMeta, "1"}};
    run.ranks.push_back(info);
  }
  const ReplicaCheck r = checkReplicas(run);
  EXPECT_FALSE(r.checked);
  EXPECT_TRUE(r.sharded);
  EXPECT_EQ(r.why_not, "the parameters are sharded (FSDP, DTensor)");
  EXPECT_EQ(replicaCheckText(r, StepUnit::kOptimizerStep), "not compared: the parameters are sharded (FSDP, DTensor)");
}

TEST(ReplicaCheck, ARunWithoutReplicasComparesNothingAndSaysNothing) {
  store::RunData run;
  run.ranks.push_back(store::RankInfo{});
  const ReplicaCheck r = checkReplicas(run);
  EXPECT_FALSE(r.checked);
  EXPECT_EQ(r.why_not, "no parameters replicated across ranks (DDP, HSDP) were recorded");
  EXPECT_EQ(replicaCheckText(r, StepUnit::kOptimizerStep), "");
  store::RunData alone = replicas(2, 3);
  std::erase_if(alone.replica_digests, [](const ReplicaDigestRecord& d) { return d.rank == 1; });
  EXPECT_FALSE(checkReplicas(alone).checked) << "one replica has nothing to be compared with";
}

// As the store keeps them (store/replica_digest_rows.h): every step's whole-model digest finds
// the step; the per-parameter digests, kept at landmarks and the newest steps only, name the
// parameter at the first kept step after it, and the text says which step named it.
TEST(ReplicaCheck, TheWholeModelFindsTheStepAndALaterKeptStepNamesTheParameter) {
  store::RunData run = replicas(3, 40);
  diverge(run, 1, 20, "head.weight");
  std::map<std::pair<int, int64_t>, std::vector<ReplicaDigestRecord>> steps;
  for (const ReplicaDigestRecord& d : run.replica_digests) steps[{d.rank, d.step}].push_back(d);
  run.replica_digests.clear();
  for (const auto& [at, rows] : steps) {
    for (const ReplicaDigestRecord& d : store::withModelDigests(rows)) {
      if (d.parameter.empty() || store::isLandmarkStep(d.step) || d.step > 39 - store::kNewestParameterSteps)
        run.replica_digests.push_back(d);
    }
  }
  const ReplicaCheck r = checkReplicas(run);
  ASSERT_TRUE(r.first_divergence);
  EXPECT_EQ(r.steps, 40);
  EXPECT_EQ(r.first_divergence->step, 20);
  EXPECT_EQ(r.first_divergence->ranks, std::vector<int>{1});
  EXPECT_EQ(r.first_divergence->parameter, "head.weight");
  EXPECT_EQ(r.first_divergence->parameter_step, 32);
  EXPECT_EQ(replicaCheckText(r, StepUnit::kOptimizerStep),
            "ranks 0, 1, 2 compared after each of 40 steps: diverged at step 20 (rank 1, first in head.weight (by the "
            "per-parameter digests of step 32))");
}

}  // namespace
}  // namespace nanprov::report
