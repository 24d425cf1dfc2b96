#include "probes/core/audit_slice.h"

#include <gtest/gtest.h>

namespace nanprov::probes {
namespace {

using Indices = std::vector<int64_t>;

TEST(AuditSlice, SmallCallsAndCallsTheSliceWouldCoverAreAuditedWhole) {
  EXPECT_FALSE(chooseAuditSlice({.batch = 8, .q_heads = 16, .kv_heads = 16}, 1000, 1000)) << "fits";
  EXPECT_FALSE(chooseAuditSlice({.batch = 2, .q_heads = 2, .kv_heads = 2}, 5000, 1000)) << "the ends are everything";
  EXPECT_FALSE(chooseAuditSlice({.batch = 2, .q_heads = 6, .kv_heads = 4}, 5000, 1000)) << "heads not in groups";
}

TEST(AuditSlice, KeepsTheFirstAndLastBatchAndHeadWithEveryRow) {
  auto s = chooseAuditSlice({.batch = 4, .q_heads = 16, .kv_heads = 16}, 5000, 1000);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->batches, (Indices{0, 3}));
  EXPECT_EQ(s->kv_heads, (Indices{0, 15}));
  EXPECT_EQ(s->q_heads, (Indices{0, 15}));
  EXPECT_EQ(s->text, "batches 0,3 of 4; heads 0,15 of 16");
}

// dK and dV sum over the query heads of their group: the slice keeps whole groups.
TEST(AuditSlice, GroupedQueryAttentionKeepsWholeGroups) {
  auto s = chooseAuditSlice({.batch = 1, .q_heads = 32, .kv_heads = 8}, 5000, 1000);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->batches, (Indices{0}));
  EXPECT_EQ(s->kv_heads, (Indices{0, 7}));
  EXPECT_EQ(s->q_heads, (Indices{0, 1, 2, 3, 28, 29, 30, 31}));
  EXPECT_EQ(s->text, "batches 0 of 1; heads 0-3,28-31 of 32 (KV heads 0,7 of 8)");
}

TEST(AuditSlice, EveryKindWithAKnownLayoutIsSlicedAlongItsOwnAxes) {
  auto sdpa = sliceAxesOf("aten::_scaled_dot_product_cudnn_attention_backward", "");
  ASSERT_TRUE(sdpa);
  EXPECT_EQ(sdpa->batch_dim, 0);
  EXPECT_EQ(sdpa->heads_dim, 1);
  for (const char* op :
       {"flex_attention", "eager_attention_forward", "multi_head_attention_forward", "module:HandAttention"}) {
    auto axes = sliceAxesOf(op, "bhsd");
    ASSERT_TRUE(axes) << op;
    EXPECT_EQ(axes->heads_dim, 1) << op;
  }
  auto fa = sliceAxesOf("flash_attn_func", "bshd");
  ASSERT_TRUE(fa);
  EXPECT_EQ(fa->batch_dim, 0);
  EXPECT_EQ(fa->heads_dim, 2) << "[batch, seq, heads, dim]";
  auto packed = sliceAxesOf("flash_attn_varlen_func", "thd");
  ASSERT_TRUE(packed);
  EXPECT_EQ(packed->batch_dim, -1) << "packed sequences are cut by head only";
  EXPECT_FALSE(sliceAxesOf("aten::_native_multi_head_attention", "")) << "inputs before the in-projection";
  EXPECT_FALSE(sliceAxesOf("aten::_flash_attention_forward", ""));
  EXPECT_FALSE(sliceAxesOf("ffpa_attn::attn", "")) << "an op of unknown layout";
}

}  // namespace
}  // namespace nanprov::probes
