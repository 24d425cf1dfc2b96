#include "probes/core/injection.h"

#include <gtest/gtest.h>

#include <cmath>

namespace nanprov::probes {
namespace {

TEST(Injection, ParsesTheDocumentedExample) {
  auto spec = parseInjection("layer=3,phase=bwd,tensor=dQ,step=5,value=nan");
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(spec->tensor, Role::kdQ);
  EXPECT_TRUE(std::isnan(spec->value));
  EXPECT_TRUE(spec->where.matches(0, 3, 5, 11, Phase::kBackward));
  EXPECT_FALSE(spec->where.matches(0, 3, 5, 11, Phase::kForward));
  EXPECT_FALSE(spec->where.matches(0, 2, 5, 11, Phase::kBackward));
  EXPECT_FALSE(spec->where.matches(0, 3, 4, 11, Phase::kBackward));
}

TEST(Injection, PhaseFollowsTheTensorAndRankFilters) {
  auto spec = parseInjection("tensor=O,value=-inf,rank=1");
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->where.phase, Phase::kForward);
  EXPECT_TRUE(std::isinf(spec->value) && spec->value < 0);
  EXPECT_TRUE(spec->where.matches(1, 0, 0, 0, Phase::kForward));
  EXPECT_FALSE(spec->where.matches(0, 0, 0, 0, Phase::kForward));
}

TEST(Injection, BadSpecsSayWhatIsWrong) {
  for (const char* bad : {"layer=3", "tensor=Q", "tensor=dQ,phase=fwd", "tensor=O,value=zeros",
                          "tensor=O,value=scale:", "tensor=O,value=scale:nan", "tensor=O,value=scale:2x",
                          "tensor=O,color=red", "tensor=O,step=x", "tensor"}) {
    auto spec = parseInjection(bad);
    ASSERT_FALSE(spec.ok()) << bad;
    EXPECT_NE(spec.status().message().find("example"), std::string::npos);
  }
}

TEST(Injection, ZeroAndScaleCorruptTheWholeTensorAndStayFinite) {
  auto zero = parseInjection("tensor=O,value=zero,layer=1");
  ASSERT_TRUE(zero.ok()) << zero.status().message();
  EXPECT_EQ(zero->corruption, Corruption::kZero);
  auto scale = parseInjection("tensor=dQ,value=scale:0.5");
  ASSERT_TRUE(scale.ok()) << scale.status().message();
  EXPECT_EQ(scale->corruption, Corruption::kScale);
  EXPECT_EQ(scale->value, 0.5);
  EXPECT_EQ(parseInjection("tensor=O,value=inf")->corruption, Corruption::kFirstElement);
}

TEST(Injection, SeveralSpecsSplitOnSemicolons) {
  auto specs = parseInjections("tensor=O,layer=0;tensor=dV,layer=1");
  ASSERT_TRUE(specs.ok());
  ASSERT_EQ(specs->size(), 2u);
  EXPECT_EQ((*specs)[1].tensor, Role::kdV);
}

}  // namespace
}  // namespace nanprov::probes
