#include "store/job.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "store/reader.h"
#include "store/run_dir.h"
#include "store/writer.h"
#include "tests/temp_dir.h"

namespace nanprov::store {
namespace {
namespace fs = std::filesystem;
using testing::freshDir;

// One rank's store, with `meta` beside its rank, as a worker writes it (one call, so readers load it).
void writeRankWith(const fs::path& dir, int rank, std::map<std::string, std::string> meta) {
  meta["rank"] = std::to_string(rank);
  auto w = StoreWriter::open((dir / rankStoreName(rank)).string(), meta);
  ASSERT_TRUE(w.ok()) << w.status().message();
  CallRecord c;
  c.rank = rank;
  c.op = "op";
  c.backend = "flash_cpu";
  (*w)->append(c);
  ASSERT_TRUE((*w)->close().ok());
}

// One rank's store of a job a launcher started.
void writeRank(const fs::path& dir, int rank, const std::string& run_id, int world_size = 2) {
  writeRankWith(
      dir, rank,
      {{"world_size", std::to_string(world_size)}, {"launcher_run_id", run_id}, {"master", "localhost:29500"}});
}

TEST(Job, DirectoriesOfOneJobReadAsOneRun) {
  fs::path node0 = freshDir("job-node0"), node1 = freshDir("job-node1");
  writeRank(node0, 0, "jobA");
  writeRank(node1, 1, "jobA");
  RunDirs both(std::vector<std::string>{node0.string(), node1.string()});
  EXPECT_TRUE(checkOneJob(both).ok()) << checkOneJob(both).message();
  auto run = loadRun(both);
  ASSERT_TRUE(run.ok()) << run.status().message();
  EXPECT_EQ(run->ranks.size(), 2u);
  EXPECT_EQ(run->dirOf(1), node1.string());
  EXPECT_TRUE(run->missingRanks().empty());
  EXPECT_TRUE(run->acrossHosts());
  auto alone = loadRun(node0.string());
  ASSERT_TRUE(alone.ok());
  EXPECT_EQ(alone->missingRanks(), std::vector<int>{1});
}

TEST(Job, AnotherJobsDirectoryIsRefusedInOneLine) {
  fs::path mine = freshDir("job-mine"), other = freshDir("job-other");
  writeRank(mine, 0, "jobA");
  writeRank(other, 1, "jobB");
  Status st = checkOneJob(RunDirs(std::vector<std::string>{mine.string(), other.string()}));
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("another job"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("jobB"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find('\n'), std::string::npos);
}

// Slurm's job and step are the job's id (probes/core/session.cpp records them as "slurm:<job>.<step>").
TEST(Job, ASlurmJobIsNamedByItsJobAndStep) {
  fs::path mine = freshDir("job-slurm-mine"), other = freshDir("job-slurm-other");
  writeRank(mine, 0, "slurm:4242.0");
  writeRank(other, 1, "slurm:4243.0");
  auto run = loadRun(mine.string());
  ASSERT_TRUE(run.ok()) << run.status().message();
  EXPECT_EQ(jobIdOf(*run), "slurm:4242.0");
  Status st = checkOneJob(RunDirs(std::vector<std::string>{mine.string(), other.string()}));
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("(Slurm job 4243.0, not 4242.0)"), std::string::npos) << st.message();
}

// A rank of a job no launcher started (plain `python`): no run id, no rendezvous master, only when
// its process started.
void writeAnonymousRank(const fs::path& dir, int rank, int64_t started_ns) {
  writeRankWith(dir, rank, {{"world_size", "2"}, {"started_ns", std::to_string(started_ns)}});
}

// Without a run id or a master, two runs of one script hours apart are two jobs, not one merged
// without comment; ranks of one job, started a minute apart, still read as one.
TEST(Job, WithoutARunIdRunsStartedHoursApartAreTwoJobs) {
  const int64_t noon = int64_t{1'764'936'000} * 1'000'000'000, minute = int64_t{60} * 1'000'000'000;
  fs::path today = freshDir("job-today"), yesterday = freshDir("job-yesterday");
  writeAnonymousRank(today, 0, noon);
  writeAnonymousRank(yesterday, 1, noon - 24 * 60 * minute);
  Status st = checkOneJob(RunDirs(std::vector<std::string>{today.string(), yesterday.string()}));
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("started 24 h apart"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find('\n'), std::string::npos);
  fs::path node0 = freshDir("job-anon0"), node1 = freshDir("job-anon1");
  writeAnonymousRank(node0, 0, noon);
  writeAnonymousRank(node1, 1, noon + minute);
  Status one = checkOneJob(RunDirs(std::vector<std::string>{node0.string(), node1.string()}));
  EXPECT_TRUE(one.ok()) << one.message();
}

TEST(Job, ARankInTwoDirectoriesOrOneDirectoryTwiceIsRefused) {
  fs::path a = freshDir("job-a"), b = freshDir("job-b");
  writeRank(a, 0, "jobA");
  writeRank(b, 0, "jobA");
  Status twice = checkOneJob(RunDirs(std::vector<std::string>{a.string(), b.string()}));
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.message().find("rank 0 is in two"), std::string::npos) << twice.message();
  Status same = checkOneJob(RunDirs(std::vector<std::string>{a.string(), a.string()}));
  ASSERT_FALSE(same.ok());
  EXPECT_NE(same.message().find("given twice"), std::string::npos) << same.message();
}

// A worker that could not create its store leaves a note: the file under its rank's name is not
// its own and is not read, and the rank is missing with the reason.
TEST(Job, AnUnrecordedRankIsMissingWithItsReason) {
  fs::path dir = freshDir("job-unrecorded");
  writeRank(dir, 0, "jobA");
  std::ofstream(dir / rankStoreName(1));  // another process's empty file under rank 1's name
  std::ofstream(dir / unrecordedNoteName(1)) << "rank-1.sqlite already exists\n";
  auto run = loadRun(dir.string());
  ASSERT_TRUE(run.ok()) << run.status().message();
  EXPECT_EQ(run->ranks.size(), 1u);
  EXPECT_EQ(run->missingRanks(), std::vector<int>{1});
  ASSERT_EQ(run->unrecorded.count(1), 1u);
  EXPECT_EQ(run->unrecorded.at(1), "rank-1.sqlite already exists");
}

}  // namespace
}  // namespace nanprov::store
