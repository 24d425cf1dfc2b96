// How the fused check walks a tensor: dimensions reordered and merged without changing which
// elements it reads. Host only: runs everywhere, GPU or not.
#include "kernels/view_layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace nanprov::kernels {
namespace {

TensorView stridedView(std::vector<int64_t> sizes, std::vector<int64_t> strides) {
  TensorView v;
  v.data = reinterpret_cast<const void*>(uintptr_t{4096});
  v.type = ElementType::kBFloat16;
  v.ndim = static_cast<int32_t>(sizes.size());
  v.numel = 1;
  for (int d = 0; d < v.ndim; ++d) {
    v.sizes[d] = sizes[d];
    v.strides[d] = strides[d];
    v.numel *= sizes[d];
  }
  return v;
}

// Every element offset a view addresses, sorted: what must not change.
std::vector<int64_t> offsets(const TensorView& v) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < v.numel; ++i) {
    int64_t off = 0, rest = i;
    for (int d = v.ndim - 1; d >= 0; --d) {
      off += (rest % v.sizes[d]) * v.strides[d];
      rest /= v.sizes[d];
    }
    out.push_back(off);
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(ViewLayout, TransposedOutputBecomesOneDenseRun) {
  // SDPA's output [B, H, S, D] laid out as [B, S, H, D].
  const int64_t B = 2, H = 4, S = 16, D = 8;
  TensorView v = stridedView({B, H, S, D}, {S * H * D, D, H * D, 1});
  TensorView s = simplified(v);
  EXPECT_EQ(s.ndim, 1);
  EXPECT_TRUE(s.contiguous);
  EXPECT_EQ(offsets(s), offsets(v));
}

TEST(ViewLayout, QkvSplitFromOneProjectionBecomesUniformRows) {
  // qkv.view(B, S, 3, H, D).permute(2, 0, 3, 1, 4)[0]: rows of H*D dense elements, 3*H*D apart.
  const int64_t B = 2, H = 4, S = 16, D = 8;
  TensorView v = stridedView({B, H, S, D}, {S * 3 * H * D, D, 3 * H * D, 1});
  TensorView s = simplified(v);
  ASSERT_EQ(s.ndim, 2);
  EXPECT_EQ(s.sizes[0], B * S);
  EXPECT_EQ(s.strides[0], 3 * H * D);
  EXPECT_EQ(s.sizes[1], H * D);
  EXPECT_EQ(s.strides[1], 1);
  EXPECT_FALSE(s.contiguous);
  EXPECT_EQ(offsets(s), offsets(v));
}

TEST(ViewLayout, BroadcastsAndSizeOneDimsKeepEveryRead) {
  TensorView v = stridedView({3, 1, 5, 7}, {0, 99, 7, 1});  // broadcast outer dim, size-1 dim
  TensorView s = simplified(v);
  EXPECT_EQ(s.numel, v.numel);
  EXPECT_EQ(offsets(s), offsets(v)) << "a broadcast element is still read once per copy";
  EXPECT_EQ(s.strides[s.ndim - 1], 1) << "the dense dimension stays innermost";
}

TEST(ViewLayout, MasksKeepTheirQueryRows) {
  TensorView v = stridedView({2, 1, 8, 8}, {64, 64, 1, 8});  // a transposed mask
  v.mask = MaskKind::kBoolAllow;
  TensorView s = simplified(v);
  EXPECT_EQ(s.ndim, 4);
  EXPECT_EQ(s.strides[2], 1) << "rows are query rows, whatever the strides";
}

TEST(ViewLayout, SameElementsMeansSameAddressesAndType) {
  TensorView a = stridedView({4, 8}, {8, 1});
  TensorView b = a;
  EXPECT_TRUE(sameElements(a, b));
  b.type = ElementType::kFloat16;
  EXPECT_FALSE(sameElements(a, b)) << "another dtype reads the bytes differently";
  b = a;
  b.strides[0] = 16;
  EXPECT_FALSE(sameElements(a, b));
}

}  // namespace
}  // namespace nanprov::kernels
