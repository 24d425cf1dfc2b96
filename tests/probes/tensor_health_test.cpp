// The probes' synchronous check (CPU tensors, and CUDA tensors the fused kernel cannot take)
// against ATen's own ops, on the layouts training hands it: transposed and sliced views, stride-0
// broadcasts, bf16/fp16/fp32/fp64, NaN and ±Inf, bool and additive masks.
#include "probes/libtorch/tensor_health.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kernels/health_check.h"

namespace nanprov::probes {
namespace {

void expectLikeAten(const at::Tensor& t) {
  SCOPED_TRACE(std::string(c10::toString(t.scalar_type())) + " " + std::to_string(t.dim()) + "-d, contiguous " +
               std::to_string(t.is_contiguous()));
  const TensorHealth h = measureTensor(t, Role::kO);
  const at::Tensor d = t.to(at::kDouble);
  EXPECT_EQ(h.nan, d.isnan().sum().item<int64_t>());
  EXPECT_EQ(h.posinf, d.isposinf().sum().item<int64_t>());
  EXPECT_EQ(h.neginf, d.isneginf().sum().item<int64_t>());
  const at::Tensor finite = d.abs().masked_fill(~d.isfinite(), 0);
  EXPECT_EQ(h.max_abs, t.numel() ? finite.max().item<double>() : 0.0);
  EXPECT_EQ(h.all_zero, t.numel() > 0 && d.eq(0).all().item<bool>());
  EXPECT_EQ(h.numel, t.numel());
}

TEST(TensorHealth, CountsEveryLayoutAndDtypeLikeAten) {
  at::manual_seed(0);
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf, at::kDouble}) {
    at::Tensor x = at::randn({2, 3, 17, 8}).mul(100).to(dtype);
    x.view(-1)[5] = NAN;
    x.view(-1)[77] = INFINITY;
    x.view(-1)[200] = -INFINITY;
    expectLikeAten(x);
    expectLikeAten(x.transpose(1, 2));                     // a fused kernel's [B, S, H, D] output
    expectLikeAten(x.slice(3, 2, 7));                      // rows that are not dense
    expectLikeAten(x.select(0, 1).expand({4, 3, 17, 8}));  // stride-0 broadcast
    expectLikeAten(x.view(-1)[300]);                       // 0-d
    expectLikeAten(at::zeros({3, 0, 4}, dtype));           // empty
    expectLikeAten(at::zeros({5, 4}, dtype).t());          // all zero
  }
}

// The bit-level pass over contiguous rows: counts across its 65536-element blocks, NaN with the
// sign bit set, -0 counted as zero, and the largest finite value found in any block.
TEST(TensorHealth, ContiguousRowsReadThroughTheirBitsAgreeWithAten) {
  at::manual_seed(1);
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf, at::kDouble}) {
    at::Tensor x = at::randn({300001}).mul(10).to(dtype);
    x[70000] = NAN;
    x[131072] = -std::numeric_limits<double>::quiet_NaN();
    x[200000] = -INFINITY;
    x[299999] = INFINITY;
    x[250000] = dtype == at::kHalf ? 60000.0 : 3e4;  // the largest finite value, in the last block
    expectLikeAten(x);
    expectLikeAten(at::zeros({70000}, dtype).neg());  // every value -0
  }
}

TEST(TensorHealth, FullyMaskedRowsOverTheMasksOwnShape) {
  at::Tensor allowed = at::ones({2, 1, 6, 5}, at::kBool);
  allowed.index_put_({0, 0, 2}, false);
  allowed.index_put_({1, 0, 4}, false);
  EXPECT_EQ(measureTensor(allowed, Role::kMask).masked_rows, 2);
  EXPECT_EQ(measureTensor(allowed.expand({2, 3, 6, 5}), Role::kMask).masked_rows, 6) << "broadcast over 3 heads";
  EXPECT_EQ(measureTensor(allowed.transpose(2, 3), Role::kMask).masked_rows, 0) << "rows are now keys";
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    at::Tensor additive = at::zeros({6, 5}, dtype);
    additive[3].fill_(-INFINITY);
    additive[4].fill_(-1e4);                  // very negative, not hidden
    additive[1].fill_(kernels::kHiddenBias);  // hidden: as SDPA converts a bool mask for cuDNN
    EXPECT_EQ(measureTensor(additive, Role::kMask).masked_rows, 2) << c10::toString(dtype);
  }
}

}  // namespace
}  // namespace nanprov::probes
