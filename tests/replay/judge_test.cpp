// The Judge on a real kernel's backward: PyTorch's CPU flash kernel in bf16, on a call where
// attention is near uniform and the keys share a large mean (deep layers of a model early in
// training). dQ = Σ P (dP − D) k is then a small difference of large terms, and rounding O to
// bf16 (dS, and O before D = rowsum(dO ∘ O)) moves it far from float64, as FlashAttention-style
// kernels compute by design. The flash-ordered yardstick makes the same error; with it the kernel
// is ok, and a dQ that is really wrong still is not.
#include "replay/judge.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "replay/backends.h"

namespace nanprov::replay {
namespace {

struct FlashBackward {
  CapturedCall call;
  Outputs kernel;  // what the CPU flash kernel computed

  FlashBackward() {
    torch::manual_seed(0);
    const int64_t b = 1, h = 4, s = 256, d = 128;
    auto bf16 = [](const at::Tensor& t) { return t.to(at::kBFloat16); };
    at::Tensor q = bf16(at::randn({b, h, s, d}) * 0.05);
    at::Tensor k = bf16(at::randn({b, h, s, d}) * 0.3 + at::randn({1, 1, 1, d}) * 8);
    at::Tensor v = bf16(at::randn({b, h, s, d}));
    at::Tensor d_o = bf16(at::randn({b, h, s, d}) * 1e-6);
    at::Tensor ql = q.clone().requires_grad_(), kl = k.clone().requires_grad_(), vl = v.clone().requires_grad_();
    at::Tensor o = at::scaled_dot_product_attention(ql, kl, vl);  // bf16 on the CPU: the flash kernel
    auto grads = torch::autograd::grad({o}, {ql, kl, vl}, {d_o});
    kernel.dq = grads[0], kernel.dk = grads[1], kernel.dv = grads[2];
    call.tensors = {{"Q", q}, {"K", k}, {"V", v}, {"O", o.detach()}, {"dO", d_o}};
    call.backward = true;
    call.batch = b, call.q_heads = h, call.kv_heads = h, call.s_q = s, call.s_kv = s, call.head_dim = d, call.v_dim = d;
  }
};

Verdict verdictOf(const std::vector<Comparison>& judged, const std::string& role) {
  for (const Comparison& c : judged) {
    if (c.role == role) return c.verdict;
  }
  ADD_FAILURE() << role << " was not judged";
  return Verdict::kUnsupported;
}

TEST(Judge, TheFlashOrderedYardstickModelsAFlashKernelsBackward) {
  FlashBackward f;
  const at::Device cpu(at::kCPU);
  std::string where;
  auto g = runReference(f.call, false, &where);
  ASSERT_TRUE(g.ok()) << g.status().message();
  const Outputs autograd_ordered = runYardstick(f.call, cpu);
  const Outputs flash_ordered = runFlashOrderedYardstick(f.call, g->o, cpu);
  ASSERT_TRUE(flash_ordered.dq.defined());

  // Far from float64 (cosine below rule 6's 0.999 would call it silent-wrong on its own) and
  // within a factor of two of what the kernel itself made: the yardstick computes as it does.
  auto maxError = [&](const at::Tensor& t) { return (t.to(at::kDouble) - g->dq).abs().max().item<double>(); };
  const double kernel = maxError(f.kernel.dq), modelled = maxError(flash_ordered.dq);
  EXPECT_GT(kernel, 10 * maxError(g->dq.to(at::kBFloat16))) << "rounding dQ alone does not explain it";
  EXPECT_LT(modelled, 2 * kernel);
  EXPECT_GT(modelled, kernel / 2);

  Judge both(*g, {&autograd_ordered, &flash_ordered});
  const auto judged = both.compareWith(f.kernel);
  EXPECT_EQ(verdictOf(judged, "dQ"), Verdict::kOk);
  EXPECT_EQ(verdictOf(judged, "dK"), Verdict::kOk);
  EXPECT_EQ(verdictOf(judged, "dV"), Verdict::kOk);

  // A dQ that is wrong beyond any ordering is still found: half of it dropped.
  Outputs wrong = f.kernel;
  wrong.dq = f.kernel.dq * 0.5;
  EXPECT_EQ(verdictOf(both.compareWith(wrong), "dQ"), Verdict::kSilentWrong);
}

TEST(Judge, AForwardHasNoFlashOrderedYardstick) {
  FlashBackward f;
  f.call.backward = false;
  EXPECT_FALSE(runFlashOrderedYardstick(f.call, f.call.at("O"), at::Device(at::kCPU)).dq.defined());
}

}  // namespace
}  // namespace nanprov::replay
