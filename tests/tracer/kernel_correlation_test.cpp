// The join of CUPTI records into kernels per call, fed with synthetic records in the orders
// CUPTI delivers them (mapping first, kernel first, across rounds).
#include "tracer/kernel_correlation.h"

#include <gtest/gtest.h>

namespace nanprov {
namespace {

LaunchedKernel kernel(uint32_t correlation, const std::string& name, int64_t start = 100) {
  LaunchedKernel k;
  k.correlation_id = correlation;
  k.name = name;
  k.grid[0] = 64, k.grid[1] = 2, k.grid[2] = 4;
  k.block[0] = 128, k.block[1] = 1, k.block[2] = 1;
  k.start_ns = start;
  k.end_ns = start + 50;
  k.device = 0;
  k.stream = 7;
  return k;
}

// The mapping of `correlation` to call `seq`, then its kernel: what the join attributes.
std::vector<KernelRecord> mappedThenLaunched(KernelCorrelation& c, uint32_t correlation, int64_t seq,
                                             const std::string& name) {
  c.onExternalId(correlation, externalIdOfCall(seq));
  c.onKernel(kernel(correlation, name));
  return c.takeAttributed();
}

TEST(KernelCorrelation, MappingBeforeKernelAttributesToTheCall) {
  KernelCorrelation c;
  auto out = mappedThenLaunched(c, 11, 5, "fmha_cutlassB_bf16_aligned_64x64_k128_sm80");
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].seq, 5);
  EXPECT_EQ(out[0].correlation_id, 11);
  EXPECT_EQ(out[0].grid[2], 4);
  EXPECT_EQ(out[0].block[0], 128);
  EXPECT_EQ(out[0].stream, 7);
}

TEST(KernelCorrelation, KernelBeforeItsMappingWaitsForIt) {
  KernelCorrelation c;
  c.onKernel(kernel(12, "k"));
  EXPECT_TRUE(c.takeAttributed().empty());
  c.endRound();
  c.onExternalId(12, externalIdOfCall(0));  // seq 0 is a call too: ids start at 1
  auto out = c.takeAttributed();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].seq, 0);
}

TEST(KernelCorrelation, SeveralKernelsOfOneCallKeepTheirOrder) {
  // One cuDNN backward: three kernels from three launches inside the same call.
  KernelCorrelation c;
  for (uint32_t id : {20u, 21u, 22u}) c.onExternalId(id, externalIdOfCall(9));
  c.onKernel(kernel(20, "dot_do_o", 1));
  c.onKernel(kernel(21, "bprop", 2));
  c.onKernel(kernel(22, "convert_dq", 3));
  auto out = c.takeAttributed();
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].name, "dot_do_o");
  EXPECT_EQ(out[2].name, "convert_dq");
  for (const auto& k : out) EXPECT_EQ(k.seq, 9);
  EXPECT_EQ(c.attributedTotal(), 3);
}

TEST(KernelCorrelation, KernelsOutsideAttentionAreForgottenAfterTwoRounds) {
  KernelCorrelation c;
  c.onKernel(kernel(30, "ampere_bf16_gemm"));  // the training's own kernel: never mapped
  c.endRound();
  c.endRound();
  c.onExternalId(30, externalIdOfCall(1));  // a late, reused id must not claim it
  EXPECT_TRUE(c.takeAttributed().empty());
}

TEST(KernelCorrelation, MappingsWaitForKernelBuffersThatArriveManyStepsLater) {
  // CUPTI returns a kernel buffer only once every record in it is complete; at each step
  // boundary the GPU is still busy, so kernel records can trail their launch records by steps.
  KernelCorrelation c;
  c.onExternalId(40, externalIdOfCall(3));
  for (int step = 0; step < 50; ++step) c.endRound();
  c.onKernel(kernel(40, "late"));
  auto out = c.takeAttributed();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].seq, 3);
}

TEST(KernelCorrelation, ExternalIdZeroNamesNoCall) {
  KernelCorrelation c;
  c.onExternalId(50, 0);  // not externalIdOfCall(anything)
  c.onKernel(kernel(50, "k"));
  EXPECT_TRUE(c.takeAttributed().empty());
}

TEST(KernelCorrelation, NamesAreDemangled) {
  KernelCorrelation c;
  auto out = mappedThenLaunched(c, 60, 2, "_ZN5cudnn6fusion28compute_dot_do_o_specializedEv");
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].name, "cudnn::fusion::compute_dot_do_o_specialized()");
  EXPECT_EQ(demangleKernelName("cudnn_generated_fort_native_sdpa_sm90_flash_bprop"),
            "cudnn_generated_fort_native_sdpa_sm90_flash_bprop");
  EXPECT_EQ(demangleKernelName("_Znot_valid_at_all"), "_Znot_valid_at_all");
}

}  // namespace
}  // namespace nanprov
