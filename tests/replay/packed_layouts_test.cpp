// FlashAttention's layouts turned into the [batch, heads, seq, dim] call replay runs: (B, S, H, D)
// transposed, packed sequences (thd) unpacked into a zero-padded batch whose mask hides the padding
// and applies FlashAttention's bottom-right causal mask per sequence, bad offsets refused, and the
// padded rows zeroed in every output after a run.
#include "replay/packed_layouts.h"

#include <gtest/gtest.h>

namespace nanprov::replay {
namespace {

CapturedCall callWith(const std::string& layout, bool causal) {
  CapturedCall call;
  call.meta["arg.layout"] = layout;
  call.meta["arg.is_causal"] = causal ? "true" : "false";
  return call;
}

TEST(PackedLayouts, BshdIsTransposedAndACausalSquareCallNeedsNoMask) {
  at::manual_seed(1);
  at::Tensor q = at::randn({2, 7, 3, 4}), k = at::randn({2, 7, 3, 4});
  CapturedCall call = callWith("bshd", true);
  call.tensors = {{"Q", q}, {"K", k}, {"V", k.clone()}};
  ASSERT_TRUE(toHeadsFirst(call).ok());
  EXPECT_TRUE(at::equal(call.at("Q"), q.transpose(1, 2)));
  EXPECT_TRUE(call.at("Q").is_contiguous());
  EXPECT_FALSE(call.has("mask")) << "SDPA's is_causal is the same mask when s_q == s_kv";
}

TEST(PackedLayouts, BshdCausalWithFewerQueriesIsAlignedBottomRight) {
  CapturedCall call = callWith("bshd", true);
  call.tensors = {{"Q", at::randn({1, 2, 1, 4})}, {"K", at::randn({1, 5, 1, 4})}, {"V", at::randn({1, 5, 1, 4})}};
  ASSERT_TRUE(toHeadsFirst(call).ok());
  ASSERT_TRUE(call.has("mask"));
  at::Tensor mask = call.at("mask");
  ASSERT_EQ(mask.sizes(), at::IntArrayRef({1, 1, 2, 5}));
  // Query i sees key j when j <= i + (s_kv - s_q) = i + 3.
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 5; ++j) EXPECT_EQ(mask[0][0][i][j].item<bool>(), j <= i + 3) << i << "," << j;
  }
  EXPECT_EQ(call.metaOr("arg.is_causal"), "false") << "folded into the mask";
}

TEST(PackedLayouts, ThdIsUnpackedIntoAPaddedBatchWithItsMask) {
  at::manual_seed(2);
  const int64_t heads = 2, dim = 3;
  at::Tensor q = at::randn({8, heads, dim}), k = at::randn({8, heads, dim});
  CapturedCall call = callWith("thd", true);
  call.tensors = {{"Q", q},
                  {"K", k},
                  {"V", k.clone()},
                  {"cu_seqlens_q", at::tensor({0, 3, 8}, at::kInt)},
                  {"cu_seqlens_k", at::tensor({0, 3, 8}, at::kInt)}};
  ASSERT_TRUE(toHeadsFirst(call).ok());
  at::Tensor uq = call.at("Q");
  ASSERT_EQ(uq.sizes(), at::IntArrayRef({2, heads, 5, dim}));
  EXPECT_TRUE(at::equal(uq[0].narrow(1, 0, 3), q.narrow(0, 0, 3).transpose(0, 1)));
  EXPECT_TRUE(at::equal(uq[1], q.narrow(0, 3, 5).transpose(0, 1)));
  EXPECT_EQ(uq[0].narrow(1, 3, 2).abs().sum().item<double>(), 0.0) << "padding is zero";
  EXPECT_FALSE(call.has("cu_seqlens_q")) << "consumed";
  ASSERT_TRUE(call.valid_q.defined());
  EXPECT_EQ(call.valid_q.sum().item<int64_t>(), 8);
  at::Tensor mask = call.at("mask");
  ASSERT_EQ(mask.sizes(), at::IntArrayRef({2, 1, 5, 5}));
  // Sequence 0 (3 keys): causal within it, its padding keys 3-4 hidden from every query.
  EXPECT_TRUE(mask[0][0][2][2].item<bool>());
  EXPECT_FALSE(mask[0][0][1][2].item<bool>());
  EXPECT_FALSE(mask[0][0][2][3].item<bool>());
  EXPECT_TRUE(mask[1][0][4][4].item<bool>());
}

TEST(PackedLayouts, BadOffsetsAndLayoutsAreRefusedInWords) {
  auto refusal = [](CapturedCall call) {
    Status st = toHeadsFirst(call);
    return st.ok() ? std::string() : st.message();
  };
  CapturedCall short_offsets = callWith("thd", false);
  short_offsets.tensors = {{"Q", at::randn({8, 1, 2})},
                           {"K", at::randn({8, 1, 2})},
                           {"cu_seqlens_q", at::tensor({0, 3, 7})},
                           {"cu_seqlens_k", at::tensor({0, 3, 8})}};
  EXPECT_NE(refusal(short_offsets).find("cu_seqlens_q runs from 0 to 7, not from 0 to the 8 packed rows"),
            std::string::npos)
      << refusal(short_offsets);
  CapturedCall decreasing = short_offsets;
  decreasing.tensors["cu_seqlens_q"] = at::tensor({0, 5, 3, 8});
  decreasing.tensors["cu_seqlens_k"] = at::tensor({0, 5, 3, 8});
  EXPECT_NE(refusal(decreasing).find("is not non-decreasing"), std::string::npos) << refusal(decreasing);
  CapturedCall floats = short_offsets;
  floats.tensors["cu_seqlens_q"] = at::tensor({0.0, 8.0});
  EXPECT_NE(refusal(floats).find("is not a 1-D integer tensor"), std::string::npos) << refusal(floats);
  EXPECT_NE(refusal(callWith("sbhd", false)).find("is not bhsd, bshd or thd"), std::string::npos);
  CapturedCall bhsd = callWith("bhsd", false);
  EXPECT_TRUE(toHeadsFirst(bhsd).ok()) << "already heads first";
}

TEST(PackedLayouts, PaddedRowsAreZeroedInEveryOutput) {
  CapturedCall call = callWith("thd", false);
  call.tensors = {{"Q", at::randn({4, 1, 2})},
                  {"K", at::randn({4, 1, 2})},
                  {"cu_seqlens_q", at::tensor({0, 1, 4})},
                  {"cu_seqlens_k", at::tensor({0, 1, 4})}};
  ASSERT_TRUE(toHeadsFirst(call).ok());
  Outputs out{.o = at::ones({2, 1, 3, 2}), .lse = at::ones({2, 1, 3}), .dk = at::ones({2, 1, 3, 2})};
  zeroPadding(call, out);
  EXPECT_EQ(out.o.sum().item<double>(), 8.0) << "4 valid rows of 2";
  EXPECT_EQ(out.lse.sum().item<double>(), 4.0);
  EXPECT_EQ(out.dk[0].narrow(1, 1, 2).abs().sum().item<double>(), 0.0) << "sequence 0 has one key";
}

}  // namespace
}  // namespace nanprov::replay
