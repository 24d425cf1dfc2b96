#include "report/timeline.h"

#include <gtest/gtest.h>

#include "tests/report/synthetic_run.h"

namespace nanprov::report {
namespace {

using synthetic::forward;
using synthetic::runOf;

KernelRecord kernel(int64_t seq, int device) {
  KernelRecord k;
  k.seq = seq, k.device = device, k.name = device < 0 ? "aten::op" : "flash_fwd_kernel";
  k.start_ns = 1'000'000 + seq * 1000 + 10, k.end_ns = k.start_ns + 100;
  return k;
}

// The window's calls move in with their health and their CUDA kernels (a CPU call's "kernel" is
// the call itself); the ranks' step ends and the edges come along.
TEST(Timeline, HoldsTheWindowsCallsTheirCudaKernelsAndTheEdges) {
  store::RunData window = runOf({forward(0, 0, 0, 0), forward(0, 1, 0, 1, /*o_nan=*/4)});
  window.ranks[0].step_ends_ns = {{0, 2'000'000}};
  window.kernels = {kernel(0, -1), kernel(1, 0), kernel(1, 0)};
  Findings findings = analyze(window);
  auto timeline = timelineOf(window, findings);
  ASSERT_TRUE(timeline.ok()) << timeline.status().message();
  const Timeline& t = *timeline;
  EXPECT_EQ(t.run, "runs/synthetic");
  ASSERT_EQ(t.calls.size(), 2u);
  EXPECT_TRUE(t.calls[0].kernels.empty()) << "the CPU op is the call's own slice";
  EXPECT_EQ(t.calls[1].kernels.size(), 2u);
  EXPECT_EQ(t.calls[1].health.kind, EdgeKind::kSourceEdge);
  EXPECT_EQ(t.first_edge, 1u);
  EXPECT_EQ(t.first_source_edge, 1u);
  EXPECT_EQ(t.origin, Origin::kAttention);
  ASSERT_EQ(t.ranks.size(), 1u);
  EXPECT_EQ(t.ranks[0].step_ends_ns.at(0), 2'000'000);
}

// Damaged times are refused in one line before any arithmetic on them can overflow.
TEST(Timeline, TimesNoTimelineCanHoldAreRefused) {
  for (auto [start, end] :
       {std::pair<int64_t, int64_t>{-9223372036854775807LL, 9223372036854775807LL}, {5'000'000'000LL, 0}, {0, 10}}) {
    store::RunData window = runOf({forward(0, 0, 0, 0)});
    window.calls[0].start_ns = start, window.calls[0].end_ns = end;
    auto refused = timelineOf(window, Findings{});
    ASSERT_FALSE(refused.ok()) << start << ".." << end;
    EXPECT_NE(refused.status().message().find("the store is damaged"), std::string::npos) << refused.status().message();
  }
  store::RunData apart = runOf({forward(0, 0, 0, 0), forward(0, 1, 0, 0)});
  apart.calls[1].start_ns += 400LL * 24 * 3600 * 1'000'000'000LL, apart.calls[1].end_ns = apart.calls[1].start_ns + 1;
  auto refused = timelineOf(apart, Findings{});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("more than a year"), std::string::npos);
}

}  // namespace
}  // namespace nanprov::report
