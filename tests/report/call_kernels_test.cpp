#include "report/call_kernels.h"

#include <gtest/gtest.h>

#include "store/reader.h"

namespace nanprov::report {
namespace {

TEST(CallKernels, ShortNamesDropTemplatesParametersAndReturnTypes) {
  EXPECT_EQ(shortKernelName("void cudnn::fusion::compute_dot_do_o_specialized<true, 128, __nv_bfloat16>(int, float*)"),
            "cudnn::fusion::compute_dot_do_o_specialized");
  EXPECT_EQ(shortKernelName(
                "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x128_1x4x1_cga1x1x1_kernel0"),
            "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x128_1x4x1_cga1x1x1_kernel0");
  EXPECT_EQ(shortKernelName("void at::native::(anonymous namespace)::fill<float>(float*)"), "at::native::anon::fill");
}

TEST(CallKernels, MainKernelIsTheLongest) {
  KernelRecord copy, attn, fill;
  copy.start_ns = 0, copy.end_ns = 5;
  attn.start_ns = 5, attn.end_ns = 500;
  fill.start_ns = 500, fill.end_ns = 510;
  EXPECT_EQ(mainKernel({&copy, &attn, &fill}), &attn);
  EXPECT_EQ(mainKernel(CallKernels{}), nullptr);
  auto j = kernelsJson({copy, attn});
  EXPECT_EQ(j[1]["main"], true);
  EXPECT_EQ(j[0]["main"], false);
  EXPECT_EQ(j[1]["duration_ns"], 495);
}

CallRecord cudaCall(int64_t seq, int64_t step, int64_t layer, const std::string& q_shape) {
  CallRecord c;
  c.seq = seq;
  c.step = step;
  c.layer = layer;
  c.phase = Phase::kBackward;
  c.op = "aten::_scaled_dot_product_cudnn_attention_backward";
  c.backend = "cudnn";
  c.device = Device::cuda(0);
  c.tensors = {
      TensorHealth{.role = Role::kQ, .dtype = DtypeName::intern("BFloat16"), .shape = *TensorShape::parse(q_shape)}};
  return c;
}

TEST(CallKernelIndex, CallsAfterTheTracedStepsShowTheKernelsOfTheSameSignature) {
  store::RunData run;
  run.calls = {cudaCall(0, 0, 1, "[4,2,64,128]"), cudaCall(1, 5, 1, "[4,2,64,128]"), cudaCall(2, 5, 1, "[4,2,32,128]"),
               cudaCall(3, 5, 0, "[4,2,64,128]")};
  run.calls[1].unattributed = "kernel tracing covered the first 2 steps";
  KernelRecord bprop;
  bprop.seq = 0;
  bprop.name = "cudnn_generated_fort_native_sdpa_sm90_flash_bprop";
  run.kernels = {bprop};
  CallKernelIndex index(run);

  KernelsOfCall own = index.of(run.calls[0]);
  EXPECT_EQ(own.inferred_from, "");
  ASSERT_EQ(own.kernels.size(), 1u);
  EXPECT_EQ(own.attribution, "CUPTI");

  KernelsOfCall later = index.of(run.calls[1]);
  EXPECT_EQ(later.from, "inferred");
  ASSERT_EQ(later.inferred_from, "rank0:layer1:call0");
  ASSERT_EQ(later.kernels.size(), 1u);
  EXPECT_EQ(later.kernels[0].name, bprop.name);
  EXPECT_NE(later.attribution.find("inferred from rank0:layer1:call0 at step 0"), std::string::npos)
      << later.attribution;

  EXPECT_EQ(index.of(run.calls[2]).inferred_from, "") << "other shapes may run other kernels";
  EXPECT_EQ(index.of(run.calls[3]).inferred_from, "") << "another layer is another call site";
}

}  // namespace
}  // namespace nanprov::report
