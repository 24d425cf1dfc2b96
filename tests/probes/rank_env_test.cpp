// Which rank a training process records as, from what its launcher put in the environment.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>

#include "probes/core/session.h"

namespace nanprov {
namespace {

const char* const kRankVariables[] = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "LOCAL_WORLD_SIZE"};

// Sets exactly `vars` of the rank variables (the others unset), reads the rank, and puts back
// what the test runner had.
RankEnv rankWith(const std::map<std::string, std::string>& vars) {
  std::map<std::string, std::string> had;
  for (const char* name : kRankVariables) {
    if (const char* value = std::getenv(name)) had[name] = value;
    unsetenv(name);
  }
  for (const auto& [name, value] : vars) setenv(name.c_str(), value.c_str(), 1);
  RankEnv env = rankFromEnvironment();
  for (const char* name : kRankVariables) unsetenv(name);
  for (const auto& [name, value] : had) setenv(name.c_str(), value.c_str(), 1);
  return env;
}

TEST(RankEnvironment, AProcessNoLauncherStartedIsRankZeroOfOne) {
  RankEnv env = rankWith({});
  EXPECT_EQ(env.rank, 0);
  EXPECT_EQ(env.local_rank, 0);
  EXPECT_EQ(env.world_size, 1);
}

TEST(RankEnvironment, TorchrunsRankWins) {
  RankEnv env = rankWith({{"RANK", "5"}, {"LOCAL_RANK", "1"}, {"WORLD_SIZE", "8"}, {"NODE_RANK", "1"}});
  EXPECT_EQ(env.rank, 5);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.world_size, 8);
}

// Lightning's subprocess launcher: local ranks 1..N-1 get LOCAL_RANK, NODE_RANK and WORLD_SIZE.
TEST(RankEnvironment, LightningsWorkersOnTheFirstNodeAreTheirLocalRank) {
  RankEnv env = rankWith({{"LOCAL_RANK", "3"}, {"NODE_RANK", "0"}, {"WORLD_SIZE", "4"}});
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.local_rank, 3);
  EXPECT_EQ(env.world_size, 4);
}

TEST(RankEnvironment, ANodesWorkersCountFromTheNodesFirstRankWhenItsSizeIsKnown) {
  EXPECT_EQ(rankWith({{"LOCAL_RANK", "2"}, {"NODE_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"}, {"WORLD_SIZE", "8"}}).rank, 6);
  EXPECT_EQ(rankWith({{"LOCAL_RANK", "1"}, {"GROUP_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}}).rank, 5);
}

// Another node without its processes-per-node: the local rank stands in (and nanprov says so).
TEST(RankEnvironment, AnotherNodeWithoutItsSizeFallsBackToTheLocalRank) {
  RankEnv env = rankWith({{"LOCAL_RANK", "1"}, {"NODE_RANK", "1"}, {"WORLD_SIZE", "4"}});
  EXPECT_EQ(env.rank, 1);
  EXPECT_EQ(env.local_rank, 1);
}

TEST(RankEnvironment, WithoutLocalRankTheLocalRankIsTheRank) {
  RankEnv env = rankWith({{"RANK", "2"}, {"WORLD_SIZE", "4"}});
  EXPECT_EQ(env.rank, 2);
  EXPECT_EQ(env.local_rank, 2);
}

TEST(RankEnvironment, GarbageFallsBackInsteadOfANegativeRank) {
  RankEnv env = rankWith({{"RANK", "-3"}, {"LOCAL_RANK", "x"}, {"WORLD_SIZE", "0"}});
  EXPECT_EQ(env.rank, 0);
  EXPECT_EQ(env.local_rank, 0);
  EXPECT_EQ(env.world_size, 1);
}

}  // namespace
}  // namespace nanprov
