// Memory-efficient attention pads its LSE to 32 query rows with +inf: the probes read only the
// call's own rows (probes/libtorch/padded_lse.h), so a clean call is not called non-finite.
#include "probes/libtorch/padded_lse.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <limits>

namespace nanprov::probes {
namespace {

// An LSE as the cutlass kernel returns it for `rows` query rows: [batch, heads, rows rounded up
// to 32], the padding +inf.
at::Tensor paddedLse(int64_t batch, int64_t heads, int64_t rows) {
  const int64_t padded = (rows + 31) / 32 * 32;
  at::Tensor lse = at::full({batch, heads, padded}, std::numeric_limits<float>::infinity());
  lse.narrow(2, 0, rows).copy_(at::randn({batch, heads, rows}));
  return lse;
}

int64_t nonFinite(const at::Tensor& t) { return at::logical_not(at::isfinite(t)).sum().item<int64_t>(); }

TEST(PaddedLse, SdpasEfficientForwardReadsOnlyItsQueryRows) {
  const AttentionOp* op = findAttentionOp("aten::_scaled_dot_product_efficient_attention");
  ASSERT_NE(op, nullptr);
  RoleTensors inputs{{Role::kQ, at::randn({2, 2, 8, 16})}};
  RoleTensors outputs{{Role::kO, at::randn({2, 2, 8, 16})}, {Role::kLSE, paddedLse(2, 2, 8)}};
  ASSERT_EQ(nonFinite(outputs[1].second), 96) << "as an H100 returned it";
  unpadLse(*op, inputs, outputs);
  EXPECT_EQ(outputs[1].second.sizes(), at::IntArrayRef({2, 2, 8}));
  EXPECT_EQ(nonFinite(outputs[1].second), 0);
}

TEST(PaddedLse, TheBackwardsLseInputAndTheLowLevelLayoutToo) {
  const AttentionOp* op = findAttentionOp("aten::_efficient_attention_backward");
  ASSERT_NE(op, nullptr);
  RoleTensors inputs{{Role::kQ, at::randn({2, 40, 2, 16})}, {Role::kLSE, paddedLse(2, 2, 40)}};
  unpadLse(*op, inputs, inputs);
  EXPECT_EQ(inputs[1].second.size(2), 40) << "[batch, rows, heads, dim]: 40 rows of 64";
  EXPECT_EQ(nonFinite(inputs[1].second), 0);
}

TEST(PaddedLse, OtherBackendsAndUnpaddedLsesAreLeftAlone) {
  RoleTensors inputs{{Role::kQ, at::randn({1, 2, 32, 16})}};
  RoleTensors aligned{{Role::kLSE, at::randn({1, 2, 32})}};
  unpadLse(*findAttentionOp("aten::_scaled_dot_product_efficient_attention"), inputs, aligned);
  EXPECT_EQ(aligned[0].second.size(2), 32);
  RoleTensors inputs8{{Role::kQ, at::randn({1, 2, 8, 16})}};
  RoleTensors flash{{Role::kLSE, paddedLse(1, 2, 8)}};
  unpadLse(*findAttentionOp("aten::_scaled_dot_product_flash_attention"), inputs8, flash);
  EXPECT_EQ(flash[0].second.size(2), 32) << "flash's LSE is never padded: a non-finite value there is real";
}

}  // namespace
}  // namespace nanprov::probes
