// The float64 reference on CUDA against the CPU reference (itself checked against PyTorch's
// float64 MATH in reference_attention_test.cpp): same semantics, same values to rounding.
// Skips without a GPU; runs in scripts/device-check.sh.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "kernels/reference_attention.h"

namespace nanprov::reference {
namespace {

std::vector<double> random(size_t n, std::mt19937_64& rng) {
  std::normal_distribution<double> dist;
  std::vector<double> v(n);
  for (double& x : v) x = dist(rng);
  return v;
}

void expectSame(const std::vector<double>& gpu, const std::vector<double>& cpu, const char* what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  for (size_t i = 0; i < cpu.size(); ++i) {
    if (std::isinf(cpu[i])) {
      ASSERT_EQ(gpu[i], cpu[i]) << what << " at " << i;
    } else {
      ASSERT_NEAR(gpu[i], cpu[i], 1e-11 * std::max(1.0, std::fabs(cpu[i]))) << what << " at " << i;
    }
  }
}

struct Case {
  AttentionShape shape;
  AttentionOptions options;
  int mask = 0;  // 0 none, 1 bool shared across heads with hidden rows, 2 additive with -inf
};

class ReferenceOnCuda : public testing::TestWithParam<Case> {};

TEST_P(ReferenceOnCuda, MatchesTheCpuReference) {
  if (!cudaReferenceAvailable()) GTEST_SKIP() << "no CUDA device: runs in scripts/device-check.sh";
  const Case& c = GetParam();
  const AttentionShape& s = c.shape;
  std::mt19937_64 rng(7);
  auto q = random(static_cast<size_t>(s.batch * s.q_heads * s.q_len * s.head_dim), rng);
  auto k = random(static_cast<size_t>(s.batch * s.kv_heads * s.kv_len * s.head_dim), rng);
  auto v = random(static_cast<size_t>(s.batch * s.kv_heads * s.kv_len * s.v_dim), rng);
  auto dout = random(static_cast<size_t>(s.batch * s.q_heads * s.q_len * s.v_dim), rng);
  // Masks of [B, 1, Sq, Sk]: broadcast over heads through a zero stride.
  std::vector<uint8_t> allow(static_cast<size_t>(s.batch * s.q_len * s.kv_len));
  std::vector<double> additive(allow.size());
  for (size_t i = 0; i < allow.size(); ++i) {
    int64_t row = static_cast<int64_t>(i) / s.kv_len % s.q_len;
    allow[i] = row % 5 == 3 ? 0 : (rng() % 4 != 0);  // every fifth row hidden
    additive[i] = allow[i] ? 0.25 * static_cast<double>(rng() % 8) : -std::numeric_limits<double>::infinity();
  }
  MaskView mask;
  if (c.mask) {
    mask.kind = c.mask == 1 ? MaskView::Kind::kBool : MaskView::Kind::kAdditive;
    mask.allow = allow.data();
    mask.additive = additive.data();
    mask.strides[0] = s.q_len * s.kv_len;
    mask.strides[1] = 0;
    mask.strides[2] = s.kv_len;
    mask.strides[3] = 1;
  }
  auto cpu = forward(s, q, k, v, mask, c.options);
  auto gpu = forwardCuda(s, q, k, v, mask, c.options);
  ASSERT_TRUE(cpu.ok() && gpu.ok()) << gpu.status().message();
  expectSame(gpu->out, cpu->out, "O");
  expectSame(gpu->lse, cpu->lse, "LSE");
  auto cpu_g = backward(s, q, k, v, mask, c.options, dout);
  auto gpu_g = backwardCuda(s, q, k, v, mask, c.options, dout);
  ASSERT_TRUE(cpu_g.ok() && gpu_g.ok()) << gpu_g.status().message();
  expectSame(gpu_g->dq, cpu_g->dq, "dQ");
  expectSame(gpu_g->dk, cpu_g->dk, "dK");
  expectSame(gpu_g->dv, cpu_g->dv, "dV");
}

AttentionOptions causal() {
  AttentionOptions o;
  o.causal = true;
  return o;
}

AttentionOptions window() {
  AttentionOptions o;
  o.window_left = 7;
  o.window_right = 3;
  o.scale = 0.3;
  return o;
}

// Readable test names ("q33_kv47_d16_nomask"), not gtest's byte dump of the struct.
std::string caseName(const testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  static const char* const kMasks[] = {"nomask", "boolmask", "additivemask"};
  return "q" + std::to_string(c.shape.q_len) + "_kv" + std::to_string(c.shape.kv_len) + "_d" +
         std::to_string(c.shape.head_dim) + "_" + kMasks[c.mask] + (c.options.causal ? "_causal" : "");
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ReferenceOnCuda,
    testing::Values(Case{{2, 4, 4, 33, 47, 16, 16}, {}, 0}, Case{{1, 8, 2, 64, 64, 128, 128}, causal(), 1},
                    Case{{2, 6, 3, 17, 130, 24, 40}, window(), 2}, Case{{1, 4, 1, 40, 72, 512, 512}, {}, 1},
                    Case{{3, 2, 2, 360, 64, 32, 32}, causal(), 2}),
    caseName);

}  // namespace
}  // namespace nanprov::reference
