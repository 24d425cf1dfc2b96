// A bounded queue for many producers and consumers, without locks (D. Vyukov's array queue): each
// cell carries a sequence number that says whose turn it is, so a push or a pop is one
// compare-and-swap on a shared index and no mutex. The probes hand each checked call to the
// store's writer thread through one: the training thread neither waits for the writer nor
// allocates. Capacity is a power of two, allocated once at construction.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace nanprov {

template <typename T>
class BoundedQueue {
 public:
  // `capacity` is rounded up to a power of two.
  explicit BoundedQueue(size_t capacity) {
    size_t n = 2;
    while (n < capacity) n <<= 1;
    mask_ = n - 1;
    cells_ = std::make_unique<Cell[]>(n);
    for (size_t i = 0; i < n; ++i) cells_[i].sequence.store(i, std::memory_order_relaxed);
  }
  BoundedQueue(const BoundedQueue&) = delete;
  BoundedQueue& operator=(const BoundedQueue&) = delete;

  // False when full: the caller decides what to do with `value`.
  bool push(const T& value) {
    size_t pos = tail_.load(std::memory_order_relaxed);
    for (;;) {
      Cell& cell = cells_[pos & mask_];
      size_t seq = cell.sequence.load(std::memory_order_acquire);
      intptr_t turn = static_cast<intptr_t>(seq) - static_cast<intptr_t>(pos);
      if (turn == 0) {
        if (tail_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          cell.value = value;
          cell.sequence.store(pos + 1, std::memory_order_release);
          return true;
        }
      } else if (turn < 0) {
        return false;  // the cell still holds a value a consumer has not taken
      } else {
        pos = tail_.load(std::memory_order_relaxed);
      }
    }
  }

  // False when empty.
  bool pop(T* out) {
    size_t pos = head_.load(std::memory_order_relaxed);
    for (;;) {
      Cell& cell = cells_[pos & mask_];
      size_t seq = cell.sequence.load(std::memory_order_acquire);
      intptr_t turn = static_cast<intptr_t>(seq) - static_cast<intptr_t>(pos + 1);
      if (turn == 0) {
        if (head_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          *out = cell.value;
          cell.sequence.store(pos + mask_ + 1, std::memory_order_release);
          return true;
        }
      } else if (turn < 0) {
        return false;
      } else {
        pos = head_.load(std::memory_order_relaxed);
      }
    }
  }

  // Approximate while producers run; exact when they are quiet.
  size_t size() const {
    size_t tail = tail_.load(std::memory_order_acquire), head = head_.load(std::memory_order_acquire);
    return tail > head ? tail - head : 0;
  }
  size_t capacity() const { return mask_ + 1; }

 private:
  struct Cell {
    std::atomic<size_t> sequence{0};
    T value{};
  };
  std::unique_ptr<Cell[]> cells_;
  size_t mask_ = 0;
  alignas(64) std::atomic<size_t> tail_{0};
  alignas(64) std::atomic<size_t> head_{0};
};

}  // namespace nanprov
