#include "report/run_overview.h"

#include <gtest/gtest.h>

#include "tests/report/synthetic_run.h"

namespace nanprov::report {
namespace {

using synthetic::forward;
using synthetic::runOf;

// What the report says of the run as a whole is read once, from the stores' meta and run.json.
TEST(RunOverview, SayWhatTheStoresAndRunFileSay) {
  store::RunData run = runOf({forward(0, 0, 0, 0)}, /*steps=*/6);
  store::RankInfo second = run.ranks[0];
  second.rank = 2, second.steps = 7, second.path = "elsewhere/rank-2.sqlite";
  second.meta = {{"world_size", "4"}, {"host", "node1"}, {"launcher_run_id", "job42"}};
  second.counters = {.trail = true, .unprobed = {{"flex_attention", 12}}};
  run.ranks.push_back(second);
  run.unrecorded = {{3, "could not create its store"}};
  run.settings.readable = true;
  run.settings.command = {"python", "train.py"};
  run.settings.signal = "SIGKILL";
  run.damage = {"rank 2 holds fewer rows than its writer committed"};
  const RunOverview f = runOverviewOf(run);
  EXPECT_EQ(f.dir, "runs/synthetic");
  EXPECT_EQ(f.steps, 7) << "the most any rank recorded";
  EXPECT_EQ(f.world_size, 4);
  EXPECT_EQ(f.missing_ranks, (std::vector<int>{1, 3}));
  EXPECT_EQ(f.unrecorded.at(3), "could not create its store");
  EXPECT_TRUE(f.clocks_differ) << "two hosts";
  EXPECT_EQ(f.job, "job42");
  EXPECT_TRUE(f.trail_on);
  EXPECT_FALSE(f.trail_missed_compiled_code);
  ASSERT_EQ(f.unchecked.size(), 1u);
  EXPECT_EQ(f.unchecked[0].count, 12);
  ASSERT_EQ(f.ranks.size(), 2u);
  EXPECT_EQ(f.ranks[1].store, "elsewhere/rank-2.sqlite");
  EXPECT_EQ(f.ranks[1].meta.at("host"), "node1");
  EXPECT_EQ(f.ranks[1].host, "node1");
  EXPECT_EQ(f.ranks[1].world_size, "4");
  EXPECT_EQ(f.ranks[0].world_size, "1");
  EXPECT_TRUE(f.run_file_readable);
  EXPECT_EQ(f.signal, "SIGKILL");
  EXPECT_EQ(f.command, (std::vector<std::string>{"python", "train.py"}));
  EXPECT_EQ(f.damage.size(), 1u);
  EXPECT_EQ(f.step_unit, StepUnit::kOptimizerStep);
}

TEST(RunOverview, StepsAreForwardPassesInInference) {
  store::RunData run = runOf({forward(0, 0, 0, 0)});
  run.ranks[0].counters.step_unit = StepUnit::kForwardPass;
  EXPECT_EQ(runOverviewOf(run).step_unit, StepUnit::kForwardPass);
  EXPECT_EQ(stepLabel(StepUnit::kForwardPass, 3), "forward pass 3");
  EXPECT_EQ(stepLabel(StepUnit::kOptimizerStep, 3), "step 3");
}

}  // namespace
}  // namespace nanprov::report
