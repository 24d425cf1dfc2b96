// End-to-end: the headline names the phase where the values first went bad (issue 61). A head
// fine-tuned on a frozen attention encoder (tests/e2e/scripts/frozen_encoder_head.py): attention's
// backward never runs, so the first values the checks see go bad are the sentinel's gradients.
// When the head's forward overflowed at that step, --trail saw it, and the headline must say the
// forward, not "gradients"; when only its backward blew up, gradients. Without --trail nothing
// outside attention was checked in the forward: the gradients are only the first values found.
// The ground truth is the script's own plain-PyTorch hooks (--oracle).
#include <gtest/gtest.h>

#include <regex>

#include "tests/e2e/e2e_support.h"

namespace {
using namespace e2e;

const std::string kScript = std::string(NANPROV_TEST_SCRIPTS) + "/frozen_encoder_head.py";

std::string firstLine(const std::string& text) { return text.substr(0, text.find('\n')); }

struct Oracle {
  int step = -1;
  std::string phase;
};

Oracle oracleOf(const std::string& out) {
  std::smatch m;
  if (!std::regex_search(out, m, std::regex("oracle: first non-finite: step (\\d+) phase (fwd|bwd)"))) return {};
  return {std::stoi(m[1].str()), m[2].str()};
}

TEST(HeadlinePhase, ForwardAlreadyNonFiniteIsNamedForwardNotGradients) {
  TrainedRun r = train("headline-forward", "--trail", "--fault forward --fault-step 2 --oracle", kScript);
  const Oracle oracle = oracleOf(r.train.out);
  ASSERT_EQ(oracle.phase, "fwd") << r.train.out;
  ASSERT_EQ(oracle.step, 2) << r.train.out;
  expectFields(r.doc, {{"outcome", "outside_attention"}});
  ASSERT_TRUE(r.doc["gradient_sentinel"].is_object()) << r.report.out;
  EXPECT_EQ(r.doc["gradient_sentinel"]["step"], oracle.step) << "the gradients went bad at the same step";
  expectFields(r.doc["first_module"], {{"step", oracle.step}, {"phase", "fwd"}, {"module", "head.fc"}});
  const std::string text = sh(nanprov() + " report " + r.dir.string()).out;
  EXPECT_EQ(firstLine(text).rfind("rank0:step 2  first non-finite values were in the forward, at step 2", 0), 0u)
      << text;
  EXPECT_EQ(text.find("were gradients"), std::string::npos) << text;
}

TEST(HeadlinePhase, OnlyTheBackwardNonFiniteIsNamedGradients) {
  TrainedRun r = train("headline-backward", "--trail", "--fault backward --fault-step 2 --oracle", kScript);
  const Oracle oracle = oracleOf(r.train.out);
  ASSERT_EQ(oracle.phase, "bwd") << r.train.out;
  ASSERT_EQ(oracle.step, 2) << r.train.out;
  EXPECT_EQ(r.doc["gradient_sentinel"]["step"], oracle.step) << r.report.out;
  const std::string text = sh(nanprov() + " report " + r.dir.string()).out;
  EXPECT_EQ(firstLine(text).rfind("rank0:step 2  first non-finite values were gradients, at step 2", 0), 0u) << text;
}

TEST(HeadlinePhase, WithoutTheTrailTheGradientsAreOnlyTheFirstFound) {
  TrainedRun r = train("headline-untrailed", "", "--fault forward --fault-step 2 --oracle", kScript);
  ASSERT_EQ(oracleOf(r.train.out).phase, "fwd") << r.train.out;
  const std::string text = sh(nanprov() + " report " + r.dir.string()).out;
  EXPECT_EQ(firstLine(text).rfind("rank0:step 2  first non-finite values found were gradients, at step 2", 0), 0u)
      << text;
  EXPECT_NE(text.find("nanprov run --trail names the module that made them"), std::string::npos) << text;
}

}  // namespace
