// End-to-end: the report's optimizer step count is the `optimizer.step()` calls the training made
// (tests/e2e/scripts/optimizer_step_count.py counts them, --oracle), for any optimizer and any
// wrapper: SGD, AdamW, an LR scheduler, a plain wrapper class, a Lookahead-style Optimizer subclass,
// torch.amp's GradScaler, a loop without zero_grad, gradient accumulation, two optimizers. Also
// where no attention ran at all, so steps were all that happened: the steps are still counted, and
// the run is still not called clean.
#include <gtest/gtest.h>

#include "tests/e2e/e2e_support.h"

namespace {
using namespace e2e;

const std::string kScript = std::string(NANPROV_TEST_SCRIPTS) + "/optimizer_step_count.py";

int oracleSteps(const std::string& out) {
  std::smatch m;
  if (!std::regex_search(out, m, std::regex("oracle: optimizer steps: (\\d+)"))) return -1;
  return std::stoi(m[1].str());
}

TEST(OptimizerStepCount, EveryStepCallIsCountedWhateverTheOptimizer) {
  for (const std::string optimizer :
       {"sgd", "adamw", "scheduler", "wrapper", "lookahead", "scaler", "no-zero-grad", "accumulate", "two"}) {
    SCOPED_TRACE(optimizer);
    TrainedRun r = train("steps-" + optimizer, "", "--optimizer " + optimizer + " --steps 4 --oracle", kScript);
    ASSERT_EQ(r.train.code, 0) << r.train.out;
    ASSERT_EQ(oracleSteps(r.train.out), 4) << r.train.out;
    EXPECT_EQ(r.report.code, 0) << r.report.out;
    EXPECT_EQ(r.doc["outcome"], "clean") << r.report.out;
    EXPECT_EQ(r.doc["summary"]["steps"], 4) << r.report.out;
    Result text = sh(nanprov() + " report " + r.dir.string());
    EXPECT_NE(text.out.find(", 4 optimizer steps"), std::string::npos) << text.out;
  }
}

TEST(OptimizerStepCount, StepsAreCountedWhenNothingButStepsHappened) {
  for (const std::string optimizer : {"sgd", "wrapper", "accumulate", "two"}) {
    SCOPED_TRACE(optimizer);
    TrainedRun r =
        train("steps-mlp-" + optimizer, "", "--model mlp --optimizer " + optimizer + " --steps 4 --oracle", kScript);
    ASSERT_EQ(oracleSteps(r.train.out), 4) << r.train.out;
    EXPECT_EQ(r.doc["summary"]["steps"], 4) << r.report.out;
    EXPECT_EQ(r.doc["outcome"], "nothing_checked") << "no attention ran: never a false clean. " << r.report.out;
    EXPECT_EQ(r.report.code, 4) << r.report.out;
  }
}

}  // namespace
