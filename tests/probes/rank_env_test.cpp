// Which rank a training process guesses it is, from what its launcher put in the environment, until
// its process group says (probes/core/process_rank.h); and how the rank's names link to what a
// process wrote before it knew.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "probes/core/process_rank.h"

namespace nanprov::probes {
namespace {

const char* const kRankVariables[] = {"RANK",
                                      "LOCAL_RANK",
                                      "WORLD_SIZE",
                                      "NODE_RANK",
                                      "GROUP_RANK",
                                      "LOCAL_WORLD_SIZE",
                                      "SLURM_PROCID",
                                      "SLURM_LOCALID",
                                      "SLURM_NTASKS",
                                      "OMPI_COMM_WORLD_RANK",
                                      "OMPI_COMM_WORLD_LOCAL_RANK",
                                      "OMPI_COMM_WORLD_SIZE",
                                      "PMI_RANK",
                                      "PMI_SIZE",
                                      "MPI_LOCALRANKID"};

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
  EXPECT_FALSE(env.said);
}

// srun starts tasks with Slurm's variables only; torchrun's RANK wins where both are set (torchrun
// inside an allocation).
TEST(RankEnvironment, SlurmTasksGuessTheirRankFromSlurm) {
  RankEnv env = rankWith({{"SLURM_PROCID", "3"}, {"SLURM_LOCALID", "1"}, {"SLURM_NTASKS", "4"}});
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.world_size, 4);
  EXPECT_TRUE(env.said);
  EXPECT_EQ(rankWith({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"RANK", "6"}, {"WORLD_SIZE", "8"}}).rank, 6);
  EXPECT_EQ(rankWith({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "3"}}).rank, 2);
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
  EXPECT_EQ(rankWith({{"LOCAL_RANK", "2"}, {"NODE_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"}, {"WORLD_SIZE", "8"}}).rank,
            6);
  EXPECT_EQ(rankWith({{"LOCAL_RANK", "1"}, {"GROUP_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}}).rank, 5);
}

// Another node without its processes-per-node: the local rank stands in until the group says.
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

// A run directory of its own under the test's temporary folder.
std::filesystem::path freshDir(const char* name) {
  auto dir = std::filesystem::temp_directory_path() /
             (std::string("nanprov-rank-link-") + name + "-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(RankLink, TheRanksNameLinksToTheProcessesFileAndTakesItAtExit) {
  auto dir = freshDir("adopt");
  std::ofstream(dir / "process-7.sqlite") << "rows";
  RankLink link(dir.string(), "process-7.sqlite");
  ASSERT_TRUE(link.link("rank-1.sqlite").ok());
  EXPECT_EQ(std::filesystem::read_symlink(dir / "rank-1.sqlite"), "process-7.sqlite") << "relative: the run may move";
  // A later rank (a group that came up after the guess settled) moves the link.
  ASSERT_TRUE(link.link("rank-2.sqlite").ok());
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::symlink_status(dir / "rank-1.sqlite")));
  link.adopt();
  EXPECT_TRUE(std::filesystem::is_regular_file(std::filesystem::symlink_status(dir / "rank-2.sqlite")));
  EXPECT_FALSE(std::filesystem::exists(dir / "process-7.sqlite"));
  std::filesystem::remove_all(dir);
}

// Two processes never share a rank's name: the second is refused and keeps its own file.
TEST(RankLink, ASecondProcessClaimingTheRankIsRefused) {
  auto dir = freshDir("taken");
  std::ofstream(dir / "process-7.sqlite") << "first";
  std::ofstream(dir / "process-8.sqlite") << "second";
  ASSERT_TRUE(RankLink(dir.string(), "process-7.sqlite").link("rank-0.sqlite").ok());
  RankLink second(dir.string(), "process-8.sqlite");
  Status st = second.link("rank-0.sqlite");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("another process of this run holds this rank"), std::string::npos) << st.message();
  second.adopt();  // not linked: nothing moves
  EXPECT_EQ(std::filesystem::read_symlink(dir / "rank-0.sqlite"), "process-7.sqlite");
  EXPECT_TRUE(std::filesystem::exists(dir / "process-8.sqlite"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace nanprov::probes
