// The bootstrap's facts: only the known keys are kept, a bad value is refused rather than written
// into the store's meta, and a later value for a key replaces the earlier one.
#include "probes/core/run_facts.h"

#include <gtest/gtest.h>

namespace nanprov::probes {
namespace {

TEST(RunFacts, OnlyKnownKeysAndPrintableValuesAreKept) {
  EXPECT_TRUE(setRunFact("cuda_build", "12.8"));
  EXPECT_TRUE(setRunFact("ptxas", "13.0.88"));
  EXPECT_FALSE(setRunFact("torch", "9.9")) << "the bootstrap must not overwrite the torch nanprov was built for";
  EXPECT_FALSE(setRunFact("triton", ""));
  EXPECT_FALSE(setRunFact("triton", "3.8\n0"));
  EXPECT_FALSE(setRunFact("triton", std::string(513, '3')));
  EXPECT_TRUE(setRunFact("cuda_build", "13.0"));
  auto facts = runFacts();
  EXPECT_EQ(facts["cuda_build"], "13.0");
  EXPECT_EQ(facts["ptxas"], "13.0.88");
  EXPECT_EQ(facts.count("torch"), 0u);
  EXPECT_EQ(facts.count("triton"), 0u);
}

}  // namespace
}  // namespace nanprov::probes
