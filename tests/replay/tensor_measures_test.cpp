// The measures of B against G taken by LibTorch (replay/tensor_measures, what a CUDA replay uses)
// against the host fold (replay/verdict, what a CPU replay and the unit tests use): the same
// counts, locations, maxima and verdicts, sums equal to rounding. On the CPU and, with a GPU, on it.
#include "replay/tensor_measures.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace nanprov::replay {
namespace {

// G with a few non-finite values; B = G plus bf16-sized noise, with NaNs in one row tile, a
// zeroed (batch, head) slice and an Inf where G itself is NaN (not B's fault).
struct Pair {
  Grid grid{2, 3, 130, 16};
  at::Tensor g, b;
  Pair() {
    at::manual_seed(7);
    g = at::randn({grid.batch, grid.heads, grid.rows, grid.cols}, at::kDouble);
    g[0][1][5][3] = std::numeric_limits<double>::quiet_NaN();
    b = (g + 1e-3 * at::randn_like(g)).to(at::kBFloat16);
    b[1][2].slice(0, 64, 70).fill_(std::numeric_limits<double>::quiet_NaN());
    b[0][2].zero_();
    b[0][1][5][3] = std::numeric_limits<double>::infinity();
  }
};

void expectSameMeasures(const Measures& device, const Measures& host) {
  EXPECT_EQ(device.err.nonfinite, host.err.nonfinite);
  EXPECT_EQ(device.compared, host.compared);
  EXPECT_EQ(device.err.max, host.err.max) << "a maximum does not depend on the order";
  EXPECT_NEAR(device.err.mean, host.err.mean, 1e-12 * host.err.mean);
  for (auto [d, h] :
       {std::pair{device.diff2, host.diff2}, {device.g2, host.g2}, {device.b2, host.b2}, {device.bg, host.bg}}) {
    EXPECT_NEAR(d, h, 1e-12 * std::fabs(h));
  }
  EXPECT_EQ(device.row_nonfinite, host.row_nonfinite);
  EXPECT_EQ(device.row_b_zero, host.row_b_zero);
  EXPECT_EQ(device.row_g_max, host.row_g_max);
}

void expectAgreement(const at::Device& device) {
  Pair p;
  at::Tensor g_host = p.g.contiguous(), b_host = p.b.to(at::kDouble).contiguous();
  Values g(g_host.data_ptr<double>(), static_cast<size_t>(g_host.numel()));
  Values b(b_host.data_ptr<double>(), static_cast<size_t>(b_host.numel()));
  Measures host = measure(p.grid, b, g);
  Measures on_device = measureTensors(p.grid, p.b.to(device), p.g.to(device));
  expectSameMeasures(on_device, host);
  EXPECT_EQ(host.err.nonfinite, 6 * 16) << "the Inf where G is NaN is not counted";

  RoleReference ref{.role = "dQ", .grid = p.grid, .g = g};
  Comparison from_device = judge(ref, on_device, 1e-3), from_host = compare(ref, b, 1e-3);
  EXPECT_EQ(from_device.verdict, Verdict::kNonFinite);
  EXPECT_EQ(from_device.nonfinite_where, from_host.nonfinite_where);
  EXPECT_EQ(from_device.nonfinite_where, "batch 1, head 2, rows 64-69 (row tile 1)");

  p.b.masked_fill_(at::isnan(p.b), 0.5);  // the zeroed slice is found once the NaNs are gone
  b_host = p.b.to(at::kDouble).contiguous();
  b = Values(b_host.data_ptr<double>(), static_cast<size_t>(b_host.numel()));
  Comparison zero = judge(ref, measureTensors(p.grid, p.b.to(device), p.g.to(device)), 1e-3);
  EXPECT_EQ(zero.verdict, Verdict::kAllZero);
  EXPECT_EQ(zero.all_zero_where, compare(ref, b, 1e-3).all_zero_where);
  EXPECT_EQ(zero.all_zero_where, "batch 0, head 2");
}

TEST(TensorMeasures, AgreeWithTheHostFoldOnTheCpu) { expectAgreement(at::Device(at::kCPU)); }

TEST(TensorMeasures, AgreeWithTheHostFoldOnCuda) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device: runs in scripts/device-check.sh";
  expectAgreement(at::Device(at::kCUDA, 0));
}

}  // namespace
}  // namespace nanprov::replay
