// The probes' own clock: stages are exclusive (an inner stage pauses the outer one), and the
// steady state is told apart from the trace window.
#include "probes/core/probe_cost.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace nanprov::probes {
namespace {

void busy(std::chrono::milliseconds d) {
  const auto until = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < until) {
  }
}

TEST(ProbeCost, AnInnerStagePausesTheOuterOne) {
  const int64_t describing = ProbeCost::total(ProbeStage::kDescribing);
  const int64_t recording = ProbeCost::total(ProbeStage::kRecording);
  {
    ProbeCost::Scope outer(ProbeStage::kDescribing);
    busy(std::chrono::milliseconds(20));
    {
      ProbeCost::Scope inner(ProbeStage::kRecording);
      busy(std::chrono::milliseconds(40));
    }
    busy(std::chrono::milliseconds(20));
  }
  const double outer_ms = (ProbeCost::total(ProbeStage::kDescribing) - describing) / 1e6;
  const double inner_ms = (ProbeCost::total(ProbeStage::kRecording) - recording) / 1e6;
  EXPECT_GE(inner_ms, 40);
  EXPECT_GE(outer_ms, 40);
  EXPECT_LT(outer_ms, 40 + inner_ms) << "the inner 40 ms are not counted twice";
}

TEST(ProbeCost, TheProbedOpItselfIsCountedNowhere) {
  int64_t before[static_cast<int>(ProbeStage::kCount)];
  for (int s = 0; s < static_cast<int>(ProbeStage::kCount); ++s)
    before[s] = ProbeCost::total(static_cast<ProbeStage>(s));
  {
    ProbeCost::Scope dispatching(ProbeStage::kDispatching);
    busy(std::chrono::milliseconds(10));
    {
      ProbeCost::Scope op(ProbeStage::kTheOp);
      busy(std::chrono::milliseconds(200));
    }
  }
  int64_t counted = 0;
  for (int s = 0; s < static_cast<int>(ProbeStage::kCount); ++s)
    counted += ProbeCost::total(static_cast<ProbeStage>(s)) - before[s];
  EXPECT_GE(ProbeCost::total(ProbeStage::kDispatching) - before[static_cast<int>(ProbeStage::kDispatching)],
            10'000'000);
  EXPECT_LT(counted, 200'000'000) << "the op's 200 ms belong to no stage";
}

TEST(ProbeCost, SummaryGivesTheSteadyStateApart) {
  ProbeCost::countCall();
  EXPECT_EQ(ProbeCost::summary().find("after the trace window"), std::string::npos);
  ProbeCost::markSteady();
  ProbeCost::countCall();
  ProbeCost::countCall();
  const std::string s = ProbeCost::summary();
  EXPECT_NE(s.find("after the trace window: dispatching "), std::string::npos) << s;
  EXPECT_NE(s.find("over 2 calls"), std::string::npos) << "calls after the window: " << s;
}

}  // namespace
}  // namespace nanprov::probes
