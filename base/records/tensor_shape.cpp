#include "base/records/tensor_shape.h"

#include <charconv>

namespace nanprov {

TensorShape TensorShape::of(const int64_t* sizes, int ndim) {
  TensorShape s;
  s.ndim = ndim < kMaxDims ? ndim : kMaxDims;
  for (int d = 0; d < ndim; ++d) {
    if (d < kMaxDims) s.dims[static_cast<size_t>(d)] = sizes[d];
    else s.dims[kMaxDims - 1] *= sizes[d];
  }
  return s;
}

std::optional<TensorShape> TensorShape::parse(std::string_view text) {
  if (text.size() < 2 || text.front() != '[' || text.back() != ']') return std::nullopt;
  text = text.substr(1, text.size() - 2);
  TensorShape s;
  while (!text.empty()) {
    if (s.ndim == kMaxDims) return std::nullopt;
    int64_t dim = 0;
    auto [end, err] = std::from_chars(text.data(), text.data() + text.size(), dim);
    if (err != std::errc() || dim < 0) return std::nullopt;
    s.dims[static_cast<size_t>(s.ndim++)] = dim;
    text.remove_prefix(static_cast<size_t>(end - text.data()));
    if (text.empty()) break;
    if (text.front() != ',' || text.size() == 1) return std::nullopt;
    text.remove_prefix(1);
  }
  return s;
}

std::string TensorShape::text() const {
  std::string out = "[";
  for (int d = 0; d < ndim; ++d) {
    if (d) out += ',';
    out += std::to_string(dims[static_cast<size_t>(d)]);
  }
  return out + "]";
}

bool TensorShape::operator==(const TensorShape& other) const {
  if (ndim != other.ndim) return false;
  for (int d = 0; d < ndim; ++d) {
    if (dims[static_cast<size_t>(d)] != other.dims[static_cast<size_t>(d)]) return false;
  }
  return true;
}

}  // namespace nanprov
