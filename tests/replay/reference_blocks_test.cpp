// Replay's float64 reference (replay/reference_blocks) against PyTorch's float64 MATH backend and
// autograd, on many random shapes with odd sizes, GQA, masks of every kind, causal, fully masked
// rows and query slabs that split a head; on CUDA against itself on the CPU.
#include "replay/reference_blocks.h"

#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <random>

namespace nanprov::replay {
namespace {

// Relative to the largest finite |value| expected; infinities must match exactly.
void expectClose(const at::Tensor& got, const at::Tensor& want, double tolerance, const char* what) {
  at::Tensor g = got.detach().cpu().to(at::kDouble).contiguous(), w = want.detach().cpu().to(at::kDouble).contiguous();
  ASSERT_EQ(g.sizes(), w.sizes()) << what;
  at::Tensor finite = w.isfinite();
  ASSERT_TRUE(at::equal(finite, g.isfinite())) << what << ": non-finite values differ";
  ASSERT_TRUE(at::equal(w.masked_select(~finite), g.masked_select(~finite))) << what << ": infinities differ";
  if (!finite.any().item<bool>()) return;
  double scale = std::max(1.0, w.masked_select(finite).abs().max().item<double>());
  double error = (g - w).masked_select(finite).abs().max().item<double>();
  EXPECT_LE(error, tolerance * scale) << what;
}

struct Shape {
  int64_t batch, q_heads, kv_heads, q_len, kv_len, head_dim, v_dim;
};

struct Case {
  Shape shape;
  bool causal = false;
  double scale = 0;
  enum class Mask { kNone, kBoolPerBatch, kBoolShared, kAdditive } mask = Mask::kNone;
  bool hide_rows = false;  // some query rows see no key
  int64_t slab_rows = 0;
};

std::string describe(const Case& c) {
  const Shape& s = c.shape;
  return "B" + std::to_string(s.batch) + " Hq" + std::to_string(s.q_heads) + " Hkv" + std::to_string(s.kv_heads) +
         " Sq" + std::to_string(s.q_len) + " Sk" + std::to_string(s.kv_len) + " D" + std::to_string(s.head_dim) +
         " Dv" + std::to_string(s.v_dim) + " mask" + std::to_string(static_cast<int>(c.mask)) +
         (c.causal ? " causal" : "") + (c.hide_rows ? " hidden-rows" : "") + " slab" + std::to_string(c.slab_rows);
}

ReferenceInputs inputsOf(const Case& c, uint64_t seed) {
  const Shape& s = c.shape;
  at::manual_seed(seed);
  auto opts = at::TensorOptions().dtype(at::kDouble);
  ReferenceInputs in;
  in.q = at::randn({s.batch, s.q_heads, s.q_len, s.head_dim}, opts);
  in.k = at::randn({s.batch, s.kv_heads, s.kv_len, s.head_dim}, opts);
  in.v = at::randn({s.batch, s.kv_heads, s.kv_len, s.v_dim}, opts);
  in.dout = at::randn({s.batch, s.q_heads, s.q_len, s.v_dim}, opts);
  if (c.mask == Case::Mask::kBoolPerBatch) in.mask = at::rand({s.batch, 1, s.q_len, s.kv_len}) > 0.3;
  if (c.mask == Case::Mask::kBoolShared) in.mask = at::rand({s.q_len, s.kv_len}) > 0.3;
  if (c.mask == Case::Mask::kAdditive) {
    in.mask = at::randn({s.batch, s.q_heads, s.q_len, s.kv_len}, opts);
    in.mask = in.mask.masked_fill(at::rand(in.mask.sizes()) < 0.2, -INFINITY);
  }
  if (c.hide_rows && in.mask.defined()) {
    in.mask = in.mask.clone();
    in.mask.select(-2, 0).fill_(in.mask.scalar_type() == at::kBool ? at::Scalar(false) : at::Scalar(-INFINITY));
  }
  in.scale = c.scale;
  in.causal = c.causal;
  in.slab_rows = c.slab_rows;
  return in;
}

// Runs one case through the reference and through torch, and compares O, LSE, dQ, dK, dV.
void check(const Case& c, uint64_t seed) {
  SCOPED_TRACE(describe(c));
  const Shape& s = c.shape;
  ReferenceInputs in = inputsOf(c, seed);
  at::Tensor q = in.q.clone().requires_grad_(), k = in.k.clone().requires_grad_(), v = in.v.clone().requires_grad_();
  std::optional<double> scale = c.scale != 0 ? std::optional<double>(c.scale) : std::nullopt;
  // SDPA's front end turns a bool mask into an additive one before any backend sees it; the MATH
  // op called directly would add the bools as numbers.
  std::optional<at::Tensor> additive;
  if (in.mask.defined()) {
    additive = in.mask.scalar_type() != at::kBool
                   ? in.mask
                   : at::zeros(in.mask.sizes(), at::kDouble).masked_fill(in.mask.logical_not(), -INFINITY);
  }
  auto [out, weights] =
      at::_scaled_dot_product_attention_math(q, k, v, additive, 0.0, c.causal, {}, scale, s.q_heads != s.kv_heads);
  out.backward(in.dout);
  // LSE as PyTorch defines it: logsumexp over the scaled, masked logits.
  at::Tensor kk = in.k.repeat_interleave(s.q_heads / s.kv_heads, 1);
  double sc = c.scale != 0 ? c.scale : 1.0 / std::sqrt(static_cast<double>(s.head_dim));
  at::Tensor logits = at::matmul(in.q, kk.transpose(-2, -1)) * sc;
  if (c.causal) logits = logits.masked_fill(at::ones({s.q_len, s.kv_len}, at::kBool).tril().logical_not(), -INFINITY);
  if (in.mask.defined()) {
    logits =
        in.mask.scalar_type() == at::kBool ? logits.masked_fill(in.mask.logical_not(), -INFINITY) : logits + in.mask;
  }

  ReferenceOutputs g = referenceByBlocks(in, at::kCPU);
  constexpr double kTolerance = 1e-12;
  expectClose(g.o, out, kTolerance, "O");
  expectClose(g.lse, logits.logsumexp(-1), kTolerance, "LSE");
  expectClose(g.dq, q.grad(), kTolerance, "dQ");
  expectClose(g.dk, k.grad(), kTolerance, "dK");
  expectClose(g.dv, v.grad(), kTolerance, "dV");
}

Case randomCase(std::mt19937& rng, int n) {
  auto pick = [&](std::vector<int64_t> from) { return from[rng() % from.size()]; };
  Case c;
  c.shape.batch = pick({1, 2});
  c.shape.kv_heads = pick({1, 2, 3});
  c.shape.q_heads = c.shape.kv_heads * pick({1, 2, 4});
  c.shape.q_len = pick({1, 2, 7, 16, 33});
  c.shape.kv_len = pick({1, 3, 16, 37, 64});
  c.shape.head_dim = pick({3, 8, 16, 64});
  c.shape.v_dim = n % 5 == 0 ? pick({5, 32}) : c.shape.head_dim;
  c.mask = static_cast<Case::Mask>(rng() % 4);
  c.causal = c.mask == Case::Mask::kNone && rng() % 2;  // PyTorch refuses both at once
  c.scale = rng() % 3 == 0 ? 0.37 : 0;
  c.hide_rows = c.mask != Case::Mask::kNone && rng() % 2;
  c.slab_rows = rng() % 3 == 0 ? pick({1, 5}) : 0;
  return c;
}

TEST(ReferenceBlocks, MatchesPyTorchMathOnRandomShapes) {
  std::mt19937 rng(2026);
  for (int n = 0; n < 60; ++n) {
    check(randomCase(rng, n), static_cast<uint64_t>(n));
    if (HasFatalFailure()) return;
  }
}

TEST(ReferenceBlocks, HeadDim512WithGqaAndFullyMaskedRows) {
  Case c;
  c.shape = {.batch = 1, .q_heads = 4, .kv_heads = 1, .q_len = 9, .kv_len = 13, .head_dim = 512, .v_dim = 512};
  c.mask = Case::Mask::kBoolPerBatch;
  c.hide_rows = true;
  c.slab_rows = 4;
  check(c, 7);
}

TEST(ReferenceBlocks, FullyMaskedRowGivesZerosAndMinusInfLse) {
  ReferenceInputs in;
  in.q = at::ones({1, 1, 2, 2}, at::kDouble);
  in.k = at::full({1, 1, 3, 2}, 0.5, at::kDouble);
  in.v = at::arange(1, 7, at::kDouble).reshape({1, 1, 3, 2});
  in.dout = at::ones({1, 1, 2, 2}, at::kDouble);
  in.mask = at::tensor({0, 0, 0, 1, 1, 1}).gt(0).reshape({2, 3});  // row 0 sees nothing
  ReferenceOutputs g = referenceByBlocks(in, at::kCPU);
  EXPECT_EQ(g.o[0][0][0][0].item<double>(), 0.0);
  EXPECT_EQ(g.o[0][0][0][1].item<double>(), 0.0);
  EXPECT_TRUE(std::isinf(g.lse[0][0][0].item<double>()) && g.lse[0][0][0].item<double>() < 0);
  EXPECT_NEAR(g.o[0][0][1][0].item<double>(), 3.0, 1e-12) << "equal logits: the mean of V";
  EXPECT_EQ(g.dq[0][0][0].abs().sum().item<double>(), 0.0);
}

// The GPU's GEMMs sum in another order than the CPU's BLAS: equal to rounding.
TEST(ReferenceBlocks, OnCudaMatchesTheCpu) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device: runs in scripts/device-check.sh";
  std::mt19937 rng(7);
  for (int n = 0; n < 20; ++n) {
    Case c = randomCase(rng, n);
    SCOPED_TRACE(describe(c));
    ReferenceInputs in = inputsOf(c, static_cast<uint64_t>(n));
    ReferenceOutputs cpu = referenceByBlocks(in, at::kCPU), gpu = referenceByBlocks(in, at::Device(at::kCUDA, 0));
    expectClose(gpu.o, cpu.o, 1e-12, "O");
    expectClose(gpu.lse, cpu.lse, 1e-12, "LSE");
    expectClose(gpu.dq, cpu.dq, 1e-12, "dQ");
    expectClose(gpu.dk, cpu.dk, 1e-12, "dK");
    expectClose(gpu.dv, cpu.dv, 1e-12, "dV");
    if (HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace nanprov::replay
