// A vector of at most N elements that lives inside its owner: what the probes fill per call on
// the training thread, where a heap allocation per call is a cost every user pays. Past N,
// push_back drops the element and says so; the owners size N by what a call can hold (one
// tensor per role).
#pragma once

#include <array>
#include <cstddef>
#include <initializer_list>

namespace nanprov {

template <typename T, size_t N>
class InlineVector {
 public:
  InlineVector() = default;
  InlineVector(std::initializer_list<T> values) {
    for (const T& v : values) push_back(v);
  }

  // False (and nothing stored) when full.
  bool push_back(const T& value) {
    if (size_ == N) return false;
    items_[size_++] = value;
    return true;
  }
  void clear() { size_ = 0; }
  void reserve(size_t) {}  // a no-op, so code written for std::vector reads the same

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  static constexpr size_t capacity() { return N; }
  T& operator[](size_t i) { return items_[i]; }
  const T& operator[](size_t i) const { return items_[i]; }
  T& back() { return items_[size_ - 1]; }
  T* data() { return items_.data(); }
  const T* data() const { return items_.data(); }
  T* begin() { return items_.data(); }
  T* end() { return items_.data() + size_; }
  const T* begin() const { return items_.data(); }
  const T* end() const { return items_.data() + size_; }

 private:
  std::array<T, N> items_{};
  size_t size_ = 0;
};

}  // namespace nanprov
