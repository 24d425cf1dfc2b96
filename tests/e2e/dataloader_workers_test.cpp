// End-to-end: DataLoader workers that run attention belong to their training process. Spawned or
// forked, they never take the rank's store (a spawned one that did left the training unrecorded,
// and the report said "clean") and their attention is never unseen: it is counted as unchecked,
// so the run is not called clean. Ground truth from plain PyTorch in the script: a forward hook
// on the training's attention, a count of the samples whose features the workers pooled by SDPA.
#include <gtest/gtest.h>

#include <regex>

#include "tests/e2e/e2e_support.h"

namespace {
using namespace e2e;

int64_t printed(const std::string& out, const std::string& what) {
  std::smatch m;
  return std::regex_search(out, m, std::regex(what + ": (\\d+)")) ? std::stoll(m[1].str()) : -1;
}

class DataLoaderWorkers : public testing::TestWithParam<std::string> {};

TEST_P(DataLoaderWorkers, KeepOutOfTheRanksStoreAndTheirAttentionIsCounted) {
  TrainedRun r = train("dataloader-" + GetParam(), "", "--context " + GetParam(),
                       std::string(NANPROV_TEST_SCRIPTS) + "/dataloader_attention.py");
  ASSERT_EQ(r.train.code, 0) << r.train.out;
  const int64_t training = printed(r.train.out, "training attention calls");
  const int64_t workers = printed(r.train.out, "worker attention calls");
  ASSERT_GT(training, 0) << r.train.out;
  ASSERT_GT(workers, 0) << r.train.out;
  // The rank's store is the training process's, holding every call it made.
  ASSERT_EQ(r.doc["ranks"].size(), 1u) << r.report.out;
  EXPECT_EQ(r.doc["ranks"][0]["meta"]["pid"], std::to_string(printed(r.train.out, "training pid"))) << r.report.out;
  EXPECT_EQ(r.doc["coverage"]["attention_calls"], training) << r.report.out;
  // The workers' attention ran unchecked, and says so: partial, never clean.
  EXPECT_EQ(r.doc["outcome"], "partial") << r.report.out;
  ASSERT_EQ(r.doc["coverage"]["unprobed"].size(), 1u) << r.report.out;
  expectFields(r.doc["coverage"]["unprobed"][0],
               {{"what", "attention in DataLoader worker processes"}, {"count", workers}, {"probe_module", nullptr}});
  EXPECT_NE(
      r.train.out.find("attention not checked: attention in DataLoader worker processes x" + std::to_string(workers)),
      std::string::npos)
      << r.train.out;
}

INSTANTIATE_TEST_SUITE_P(StartMethods, DataLoaderWorkers, testing::Values("spawn", "fork"));

// A real overflow in the training process, with spawned workers running attention beside it:
// the edge is the training's, at its step.
TEST(DataLoaderWorkersEdge, TheTrainingsEdgeIsFoundBesideThem) {
  TrainedRun r = train("dataloader-edge", "", "--context spawn --glitch-step 2",
                       std::string(NANPROV_TEST_SCRIPTS) + "/dataloader_attention.py");
  ASSERT_EQ(r.report.code, 1) << r.train.out;
  expectFields(r.doc["first_edge"], {{"rank", 0}, {"step", 2}, {"phase", "fwd"}, {"origin", "attention"}});
}

}  // namespace
