// End-to-end: `nanprov run --trail` on a CLIP-like image tower with a convolution stem, as open_clip
// builds it (tests/e2e/scripts/conv_stem_vit.py: conv1, a class token and positional embedding
// added in plain code, ln_pre, then nn.MultiheadAttention blocks). The first module whose output
// went non-finite is the stem's, whether the NaN came with the images or the convolution made it;
// the script's own plain-PyTorch hooks (--oracle) say which, and whether its inputs were finite.
#include <gtest/gtest.h>

#include <regex>

#include "tests/e2e/e2e_support.h"

namespace {
using namespace e2e;

std::string script() { return std::string(NANPROV_TEST_SCRIPTS) + "/conv_stem_vit.py"; }

// The oracle's line: {step, module, "finite" | "non-finite"}.
std::tuple<int, std::string, std::string> oracleOf(const std::string& out) {
  std::smatch m;
  static const std::regex line("oracle: step (\\d+) phase fwd first (\\S+) inputs (finite|non-finite)");
  if (!std::regex_search(out, m, line)) return {-1, "", ""};
  return {std::stoi(m[1]), m[2], m[3]};
}

// A NaN in the images: the stem is the first module whose output was non-finite, and its inputs
// already were: the report says the values came with the data, never that no module's output was
// non-finite before attention.
TEST(ConvStemTrail, ANanInTheImagesIsNamedAtTheStemAsComingWithTheData) {
  TrainedRun r = train("stem-trail-data", "--trail", "--oracle --fault data", script());
  ASSERT_EQ(r.report.code, 1) << r.train.out << r.report.out;
  EXPECT_EQ(oracleOf(r.train.out), std::make_tuple(2, std::string("conv1"), std::string("non-finite"))) << r.train.out;
  ASSERT_TRUE(r.doc["first_module"].is_object()) << r.report.out;
  expectFields(r.doc["first_module"], {{"step", 2},
                                       {"phase", "fwd"},
                                       {"module", "conv1"},
                                       {"class", "Conv2d"},
                                       {"inputs_finite", false},
                                       {"inputs", "non_finite"}});
  expectFields(r.doc["first_edge"], {{"origin", "upstream"}, {"step", 2}, {"phase", "fwd"}});
  Result text = sh(nanprov() + " report " + r.dir.string());
  EXPECT_NE(text.out.find("the first non-finite value was the output of conv1 (Conv2d), whose inputs were already "
                          "non-finite: they came from outside any module"),
            std::string::npos)
      << text.out;
  EXPECT_EQ(text.out.find("no module's output was non-finite"), std::string::npos) << text.out;
}

// conv1's weight overflows its output from finite images: the stem is named, from finite inputs,
// at the step and phase the oracle found, not ln_pre or the attention that received it.
TEST(ConvStemTrail, AStemThatOverflowsIsNamedFromFiniteInputs) {
  TrainedRun r = train("stem-trail-conv", "--trail", "--oracle --fault conv", script());
  ASSERT_EQ(r.report.code, 1) << r.train.out << r.report.out;
  EXPECT_EQ(oracleOf(r.train.out), std::make_tuple(2, std::string("conv1"), std::string("finite"))) << r.train.out;
  ASSERT_TRUE(r.doc["first_module"].is_object()) << r.report.out;
  expectFields(r.doc["first_module"],
               {{"step", 2}, {"phase", "fwd"}, {"module", "conv1"}, {"class", "Conv2d"}, {"inputs_finite", true}});
  EXPECT_EQ(r.doc["first_edge"]["origin"], "upstream");
  Result text = sh(nanprov() + " report " + r.dir.string());
  EXPECT_NE(
      text.out.find("reached attention from upstream: the first non-finite value was the output of conv1 (Conv2d), "
                    "from finite inputs"),
      std::string::npos)
      << text.out;
}

}  // namespace
