// ModulePathCache on real autograd graphs: which parameter names a call's Q, and when the stack
// walk (here a counting stand-in for the bootstrap's callback) is still asked.
#include "probes/libtorch/module_path_cache.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace nanprov::probes {
namespace {

bool same(const at::Tensor& a, const at::Tensor& b) {
  return a.defined() && b.defined() && a.unsafeGetTensorImpl() == b.unsafeGetTensorImpl();
}

TEST(ModulePathCache, QsParameterIsTheNearestOneBehindIt) {
  torch::nn::Linear earlier(8, 8), q_proj(8, 8);
  at::Tensor norm = torch::ones({8}, torch::requires_grad());
  at::Tensor x = torch::randn({2, 4, 8});
  // An earlier layer's output, normed by this layer's weight, projected, split into heads and
  // rotated by constants: the parameter nearest Q is the projection's (its bias or weight).
  at::Tensor h = earlier(x) * norm;
  at::Tensor q = q_proj(h).view({2, 4, 2, 4}).transpose(1, 2) * torch::full({1}, 0.5);
  at::Tensor p = ModulePathCache::sourceParameter(q);
  EXPECT_TRUE(same(p, q_proj->weight) || same(p, q_proj->bias));
}

TEST(ModulePathCache, NoParameterWithoutAGraph) {
  torch::nn::Linear q_proj(8, 8);
  at::Tensor x = torch::randn({2, 8});
  {
    torch::NoGradGuard no_grad;
    EXPECT_FALSE(ModulePathCache::sourceParameter(q_proj(x)).defined());
  }
  at::Tensor leaf = torch::randn({2, 8}, torch::requires_grad());
  EXPECT_FALSE(ModulePathCache::sourceParameter(leaf).defined()) << "Q itself a leaf: nothing behind it";
  // Autograd knows no parameters, only leaves: a leaf input made into Q is Q's source.
  EXPECT_TRUE(same(ModulePathCache::sourceParameter(leaf * 2), leaf));
}

TEST(ModulePathCache, FreshLeavesEveryStepDoNotGrowItWithoutBound) {
  ModulePathCache cache;
  for (int i = 0; i < 3 * ModulePathCache::kMaxEntries; ++i) {
    at::Tensor leaf = torch::ones({1}, torch::requires_grad());  // freed at the end of the iteration
    cache.path(leaf, [] { return std::string("attn"); });
  }
  EXPECT_LE(cache.size(), ModulePathCache::kMaxEntries);
}

TEST(ModulePathCache, AsksTheStackUntilItsAnswerWasConfirmed) {
  ModulePathCache cache;
  at::Tensor w = torch::ones({4}, torch::requires_grad());
  int asked = 0;
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(cache.path(w,
                         [&] {
                           ++asked;
                           return std::string("layers.3.attn");
                         }),
              "layers.3.attn");
  }
  EXPECT_EQ(asked, ModulePathCache::kConfirmations);
}

TEST(ModulePathCache, ATiedParameterIsAlwaysAskedAbout) {
  ModulePathCache cache;
  at::Tensor tied = torch::ones({4}, torch::requires_grad());
  int asked = 0;
  for (int i = 0; i < 10; ++i) {
    std::string where = i % 2 ? "decoder.attn" : "encoder.attn";
    EXPECT_EQ(cache.path(tied,
                         [&] {
                           ++asked;
                           return where;
                         }),
              where);
  }
  EXPECT_EQ(asked, 10);
}

TEST(ModulePathCache, WithoutAParameterTheStackIsAskedEveryTime) {
  ModulePathCache cache;
  int asked = 0;
  for (int i = 0; i < 5; ++i)
    cache.path(at::Tensor(), [&] {
      ++asked;
      return std::string("attn");
    });
  EXPECT_EQ(asked, 5);
  EXPECT_EQ(cache.size(), 0);
}

}  // namespace
}  // namespace nanprov::probes
