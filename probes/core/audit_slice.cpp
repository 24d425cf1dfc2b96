#include "probes/core/audit_slice.h"

namespace nanprov::probes {
namespace {

// {0, n-1}, or {0} when n is 1.
std::vector<int64_t> ends(int64_t n) { return n > 1 ? std::vector<int64_t>{0, n - 1} : std::vector<int64_t>{0}; }

// "0,3" / "0-1,14-15": consecutive indices as ranges.
std::string indexText(const std::vector<int64_t>& v) {
  std::string out;
  for (size_t i = 0; i < v.size();) {
    size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
    out += (out.empty() ? "" : ",") + std::to_string(v[i]) + (j > i ? "-" + std::to_string(v[j]) : "");
    i = j + 1;
  }
  return out;
}

}  // namespace

std::optional<SliceAxes> sliceAxesOf(std::string_view op, std::string_view layout) {
  if (op.starts_with("aten::")) {
    if (op.starts_with("aten::_scaled_dot_product_")) return SliceAxes{};
    return std::nullopt;  // the fast path, and the lower-level flash/efficient ops
  }
  if (layout == "bhsd") return SliceAxes{};
  if (layout == "bshd") return SliceAxes{.batch_dim = 0, .heads_dim = 2};
  if (layout == "thd") return SliceAxes{.batch_dim = -1, .heads_dim = 1};
  return std::nullopt;
}

std::optional<AuditSlice> chooseAuditSlice(const AuditShape& shape, int64_t bytes, int64_t slice_bytes) {
  if (bytes <= slice_bytes || shape.batch < 1 || shape.kv_heads < 1 || shape.q_heads % shape.kv_heads != 0) {
    return std::nullopt;
  }
  AuditSlice s;
  s.batches = ends(shape.batch);
  s.kv_heads = ends(shape.kv_heads);
  if (s.batches.size() == static_cast<size_t>(shape.batch) &&
      s.kv_heads.size() == static_cast<size_t>(shape.kv_heads)) {
    return std::nullopt;  // the slice would be the whole call
  }
  const int64_t group = shape.q_heads / shape.kv_heads;
  for (int64_t kv : s.kv_heads) {
    for (int64_t h = kv * group; h < (kv + 1) * group; ++h) s.q_heads.push_back(h);
  }
  s.text = "batches " + indexText(s.batches) + " of " + std::to_string(shape.batch) + "; heads " +
           indexText(s.q_heads) + " of " + std::to_string(shape.q_heads);
  if (group > 1) s.text += " (KV heads " + indexText(s.kv_heads) + " of " + std::to_string(shape.kv_heads) + ")";
  return s;
}

}  // namespace nanprov::probes
