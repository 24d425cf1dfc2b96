// Replay's rebuilt layouts: a captured tensor comes back with the run's strides, storage offset
// and data-pointer alignment, and a copy to a backend keeps them; what cannot be rebuilt is said.
#include "replay/tensor_layout.h"

#include <gtest/gtest.h>

#include "base/pointer_alignment.h"

namespace nanprov::replay {
namespace {

TEST(TensorLayout, PointerAlignmentIsTheLargestPowerOfTwoUpTo256) {
  EXPECT_EQ(pointerAlignment(uintptr_t{0x1000}), 256);
  EXPECT_EQ(pointerAlignment(uintptr_t{0x1004}), 4);
  EXPECT_EQ(pointerAlignment(uintptr_t{0x1040}), 64);
  EXPECT_EQ(pointerAlignment(uintptr_t{0x1001}), 1);
}

TEST(TensorLayout, AViewIntoAFusedBufferIsRebuiltAtItsOffsetAndAlignment) {
  at::Tensor fused = at::randn({2, 5, 49});
  at::Tensor q = fused.narrow(2, 1, 16).view({2, 5, 2, 8}).transpose(1, 2);  // offset 1: 4-byte aligned
  TensorLayout recorded = layoutOf(q);
  ASSERT_EQ(*recorded.storage_offset, 1);
  LayoutReport report;
  at::Tensor rebuilt = withRecordedLayout(q.contiguous(), recorded, &report);
  EXPECT_TRUE(report.faithful()) << report.note;
  EXPECT_EQ(rebuilt.strides(), q.strides());
  EXPECT_EQ(rebuilt.storage_offset(), 1);
  EXPECT_EQ(pointerAlignment(rebuilt.data_ptr()), pointerAlignment(q.data_ptr()));
  EXPECT_TRUE(rebuilt.equal(q));
  // Each backend's copy keeps the layout, in memory of its own.
  at::Tensor copy = replicaOn(rebuilt, at::kCPU);
  EXPECT_NE(copy.data_ptr(), rebuilt.data_ptr());
  EXPECT_EQ(copy.strides(), q.strides());
  EXPECT_EQ(copy.storage_offset(), 1);
  EXPECT_EQ(pointerAlignment(copy.data_ptr()), pointerAlignment(q.data_ptr()));
  EXPECT_TRUE(copy.equal(q));
}

TEST(TensorLayout, EveryRecordedAlignmentIsRebuilt) {
  at::Tensor values = at::randn({3, 4});
  for (int64_t align : {4, 8, 16, 32, 64, 128, 256}) {
    TensorLayout recorded;
    recorded.strides = std::vector<int64_t>{4, 1};
    recorded.storage_offset = 3;
    recorded.alignment = align;
    LayoutReport report;
    at::Tensor t = withRecordedLayout(values, recorded, &report);
    EXPECT_EQ(pointerAlignment(t.data_ptr()), align);
    EXPECT_EQ(t.storage_offset(), 3);
    EXPECT_TRUE(t.equal(values));
  }
}

TEST(TensorLayout, BroadcastKeysKeepStrideZeroAndOverlapFallsBackSayingSo) {
  at::Tensor k = at::randn({1, 1, 6, 8}).expand({2, 4, 6, 8});
  LayoutReport report;
  at::Tensor rebuilt = withRecordedLayout(k.contiguous(), layoutOf(k), &report);
  EXPECT_TRUE(report.faithful()) << report.note;
  EXPECT_EQ(rebuilt.stride(0), 0);
  EXPECT_TRUE(rebuilt.equal(k));
  // Values that differ along a stride-0 dimension cannot be that layout: replayed contiguous.
  LayoutReport odd;
  at::Tensor differs = withRecordedLayout(at::randn({2, 4, 6, 8}), layoutOf(k), &odd);
  EXPECT_FALSE(odd.faithful());
  EXPECT_TRUE(differs.is_contiguous());
}

TEST(TensorLayout, MissingOrMalformedFactsAreSaid) {
  LayoutReport report;
  at::Tensor t = withRecordedLayout(at::randn({2, 3}), TensorLayout{}, &report);
  EXPECT_EQ(report.note, "layout not recorded, replayed contiguous");
  EXPECT_TRUE(t.is_contiguous());
  const std::map<std::string, std::string> meta = {
      {"stride.Q", "[3,1]"}, {"offset.Q", "-1"}, {"align.K", "48"}, {"stride.V", "[3]"}};
  EXPECT_EQ(recordedLayout(meta, "Q", 2).status().message(), "offset.Q '-1' is not a storage offset");
  EXPECT_EQ(recordedLayout(meta, "K", 2).status().message(), "align.K '48' is not a power of two from 1 to 256");
  EXPECT_EQ(recordedLayout(meta, "V", 2).status().message(), "stride.V '[3]' has 1 strides for 2 dimensions");
  EXPECT_FALSE(recordedLayout(meta, "O", 2).value().strides.has_value());
}

}  // namespace
}  // namespace nanprov::replay
