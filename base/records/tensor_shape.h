// A tensor's sizes, held inline: the training thread fills it from the tensor with no string and
// no allocation. Its text form, "[2,4,64,32]", is what the store, the JSON and the report hold.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace nanprov {

struct TensorShape {
  // Attention tensors have at most 5 dims; a tensor with more keeps its first kMaxDims - 1 and the
  // product of the rest in the last one, so numel stays exact and the text stays readable.
  static constexpr int kMaxDims = 8;

  int ndim = 0;
  std::array<int64_t, kMaxDims> dims{};

  static TensorShape of(const int64_t* sizes, int ndim);
  // "[2,4,64,32]"; nullopt for anything else (a store written by something else).
  static std::optional<TensorShape> parse(std::string_view text);
  std::string text() const;
  bool operator==(const TensorShape& other) const;
};

}  // namespace nanprov
