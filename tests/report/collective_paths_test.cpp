#include "report/collective_paths.h"

#include <gtest/gtest.h>

#include "store/reader.h"

namespace nanprov::report {
namespace {

CollectiveRecord allreduce(int rank, int64_t nan_in, int64_t nan_out) {
  CollectiveRecord c{.rank = rank, .step = 2, .ord = 0, .op = "c10d::allreduce_", .group = "0", .group_size = 2};
  c.input = CollectiveSide{.checked = true, .numel = 8, .nan = nan_in};
  c.output = CollectiveSide{.checked = true, .numel = 8, .nan = nan_out};
  return c;
}

// Two ranks: rank 0 sent NaN into an all-reduce, rank 1 received it there. Rank 1 made nothing:
// its path names the collective, the rank it came from and the gradients it carried.
TEST(CollectivePaths, ARankThatReceivedTheValuesIsToldWhereFrom) {
  store::RunData run;
  store::RankInfo rank;
  rank.meta = {{"world_size", "2"}};
  run.ranks = {rank, rank};
  run.ranks[1].rank = 1;
  run.collectives = {allreduce(0, 4, 8), allreduce(1, 0, 8)};
  run.sentinel = {SentinelRecord{.rank = 1, .step = 2, .tensor = SentinelTensor::kGrad, .parameter = "head.weight"},
                  SentinelRecord{.rank = 1, .step = 2, .tensor = SentinelTensor::kParam, .parameter = "head.bias"}};
  const std::vector<CollectivePath> paths = collectivePaths(run);
  ASSERT_EQ(paths.size(), 1u);
  const CollectivePath& p = paths[0];
  EXPECT_EQ(p.rank, 1);
  EXPECT_EQ(p.from, std::vector<int>{0});
  EXPECT_FALSE(p.made_by_collective);
  EXPECT_EQ(p.parameters, std::vector<std::string>{"head.weight"}) << "gradients only";
  EXPECT_EQ(receivedThroughCollective(paths), (std::set<std::pair<int, int64_t>>{{1, 2}}));
  EXPECT_EQ(
      collectivePathText(p, StepUnit::kOptimizerStep, "head.weight"),
      "rank 1: gradients went non-finite at step 2 in c10d::allreduce_ (carrying head.weight): its input was finite "
      "here and non-finite on rank 0");
  const nlohmann::json j = collectivePathJson(p);
  EXPECT_EQ(j["from_ranks"], nlohmann::json::array({0}));
  EXPECT_EQ(j["parameters"], nlohmann::json::array({"head.weight"}));
  EXPECT_EQ(j["ordinal"], 0);
}

// No rank's input was non-finite and every rank was read: the reduction itself overflowed.
TEST(CollectivePaths, ACollectiveThatMadeTheValuesIsSaidSo) {
  store::RunData run;
  run.ranks = {store::RankInfo{.rank = 0, .meta = {{"world_size", "1"}}}};
  run.collectives = {allreduce(0, 0, 8)};
  const std::vector<CollectivePath> paths = collectivePaths(run);
  ASSERT_EQ(paths.size(), 1u);
  EXPECT_TRUE(paths[0].made_by_collective);
  EXPECT_NE(
      collectivePathText(paths[0], StepUnit::kForwardPass, "").find("rank 0: values went non-finite at forward pass 2"),
      std::string::npos);
  EXPECT_NE(collectivePathText(paths[0], StepUnit::kOptimizerStep, "").find("the collective itself made them"),
            std::string::npos);
}

}  // namespace
}  // namespace nanprov::report
