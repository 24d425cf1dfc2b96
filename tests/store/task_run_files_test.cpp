#include "store/task_run_files.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "store/run_file.h"
#include "tests/temp_dir.h"

namespace nanprov::store {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;
using testing::freshDir;

json taskDoc(int task, int64_t started_ns) {
  return {{"command", {"python", "train.py"}}, {"started_ns", started_ns}, {"slurm", {{"job", "7.0"}, {"task", task}}}};
}

TEST(TaskRunFiles, EachTaskClaimsItsOwnFileOnce) {
  fs::path dir = freshDir("task-claim");
  auto first = claimTaskRunFile(dir.string(), 1, taskDoc(1, 5));
  ASSERT_TRUE(first.ok() && *first) << (first.ok() ? "" : first.status().message());
  auto again = claimTaskRunFile(dir.string(), 1, taskDoc(1, 6));
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(*again);
  EXPECT_EQ(readRunFile(dir.string()).started_ns, 5);  // the first claim's file, whole
  EXPECT_EQ(taskRunFilePaths(dir.string()).size(), 1u);
  EXPECT_TRUE(holdsRunFile(dir.string()));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);  // nothing left aside
}

TEST(TaskRunFiles, TheRunEndsWhenEveryTaskEnded) {
  fs::path dir = freshDir("task-merge");
  ASSERT_TRUE(claimTaskRunFile(dir.string(), 0, taskDoc(0, 20)).ok());
  ASSERT_TRUE(claimTaskRunFile(dir.string(), 1, taskDoc(1, 10)).ok());
  json ended = taskDoc(0, 20);
  ended["exit_code"] = 3;
  ASSERT_TRUE(writeTaskRunFile(dir.string(), 0, ended).ok());
  RunFile f = readRunFile(dir.string());
  ASSERT_TRUE(f.readable);
  TaskStates states = taskStates(dir.string());
  EXPECT_EQ(states.job, (std::map<int, std::string>{{0, "7.0"}, {1, "7.0"}}));
  EXPECT_EQ(states.running, std::vector<int>{1});
  EXPECT_FALSE(f.ended());
  EXPECT_EQ(f.started_ns, 10);  // the earliest task's start
  EXPECT_EQ(f.command, (std::vector<std::string>{"python", "train.py"}));

  json zero = taskDoc(1, 10);
  zero["exit_code"] = 0;
  ASSERT_TRUE(writeTaskRunFile(dir.string(), 1, zero).ok());
  f = readRunFile(dir.string());
  EXPECT_TRUE(taskStates(dir.string()).running.empty());
  EXPECT_EQ(f.exit_code, 3);  // the highest, as srun says a step's
}

TEST(TaskRunFiles, OnlyNamesNanprovWritesAreTasks) {
  fs::path dir = freshDir("task-names");
  for (const char* name : {"run.task-01.json", "run.task-x.json", "run.task-.json", "run.task-2.json.claim.9"}) {
    std::ofstream(dir / name) << "{}";
  }
  EXPECT_TRUE(taskRunFilePaths(dir.string()).empty());
  EXPECT_FALSE(readRunFile(dir.string()).readable);
}

}  // namespace
}  // namespace nanprov::store
