#include "probes/audit_slice.h"

#include <gtest/gtest.h>

namespace nanprov {
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

TEST(AuditSlice, OnlyTheScaledDotProductOpsAreSliced) {
  EXPECT_TRUE(sliceableOp("aten::_scaled_dot_product_cudnn_attention_backward"));
  EXPECT_TRUE(sliceableOp("aten::_scaled_dot_product_flash_attention_for_cpu"));
  EXPECT_FALSE(sliceableOp("aten::_flash_attention_forward")) << "[batch, seq, heads, dim] or packed";
  EXPECT_FALSE(sliceableOp("flash_attn.cute::flash_attn_func"));
}

}  // namespace
}  // namespace nanprov
