// Which part of a big call the audit judges (DESIGN.md, "Audit"): a few (batch, head) pairs, with
// every query row and every key of each, so a fault confined to some rows or row tiles is still
// inside the slice. The pairs are the first and the last batch (left padding and ragged batches
// differ most there) times the first and the last KV head group (a head-stride or GQA-mapping
// fault shows at the ends first), each group with all its query heads, so that dK and dV, which
// sum over a group's query heads, are whole. Plain logic, no LibTorch: unit-tested.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace nanprov::probes {

struct AuditSlice {
  std::vector<int64_t> batches;   // ascending
  std::vector<int64_t> kv_heads;  // ascending
  std::vector<int64_t> q_heads;   // the query heads of those KV heads' groups, ascending
  std::string text;               // "batches 0,3 of 4; heads 0-1,14-15 of 16 (KV heads 0,7 of 8)"
};

// The shape of a call as the audit sees it: [batch, heads, rows, dim] for Q, [batch, kv_heads,
// keys, dim] for K and V.
struct AuditShape {
  int64_t batch = 0, q_heads = 0, kv_heads = 0;
};

// Where a call's tensors hold their batch and head dimensions.
struct SliceAxes {
  int64_t batch_dim = 0;  // -1: packed sequences (thd), sliced by head only
  int64_t heads_dim = 1;
};

// The axes of a call of `op` whose tensors are in `layout` (the layout its probe recorded, "" for
// the ATen ops): "bhsd" [batch, heads, seq, dim] (the scaled_dot_product ops, FlexAttention, the
// plain-softmax paths, module probes), "bshd" [batch, seq, heads, dim] (FlashAttention), "thd"
// [total, heads, dim] (packed: heads only). nullopt for calls audited whole: the fast path, whose
// capture holds its inputs before the in-projection, and ops of unknown layout.
std::optional<SliceAxes> sliceAxesOf(std::string_view op, std::string_view layout);

// The slice to audit of a call of `shape` whose tensors hold `bytes`; nullopt when the call is
// audited whole: it fits in `slice_bytes`, or the slice would be the whole call.
std::optional<AuditSlice> chooseAuditSlice(const AuditShape& shape, int64_t bytes, int64_t slice_bytes);

}  // namespace nanprov::probes
