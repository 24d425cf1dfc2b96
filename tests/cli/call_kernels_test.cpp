#include "cli/call_kernels.h"

#include <gtest/gtest.h>

namespace nanprov {
namespace {

TEST(CallKernels, ShortNamesDropTemplatesParametersAndReturnTypes) {
  EXPECT_EQ(shortKernelName("void cudnn::fusion::compute_dot_do_o_specialized<true, 128, __nv_bfloat16>(int, float*)"),
            "cudnn::fusion::compute_dot_do_o_specialized");
  EXPECT_EQ(shortKernelName("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x128_1x4x1_cga1x1x1_kernel0"),
            "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x128_1x4x1_cga1x1x1_kernel0");
  EXPECT_EQ(shortKernelName("void at::native::(anonymous namespace)::fill<float>(float*)"),
            "at::native::anon::fill");
}

TEST(CallKernels, MainKernelIsTheLongest) {
  KernelRecord copy, attn, fill;
  copy.start_ns = 0, copy.end_ns = 5;
  attn.start_ns = 5, attn.end_ns = 500;
  fill.start_ns = 500, fill.end_ns = 510;
  EXPECT_EQ(mainKernel({&copy, &attn, &fill}), &attn);
  EXPECT_EQ(mainKernel({}), nullptr);
  auto j = kernelsJson({&copy, &attn});
  EXPECT_EQ(j[1]["main"], true);
  EXPECT_EQ(j[0]["main"], false);
  EXPECT_EQ(j[1]["duration_ns"], 495);
}

}  // namespace
}  // namespace nanprov
