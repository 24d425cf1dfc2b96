// ThreadSlots<T>: one object per thread and key (a device), owned by the thread that made it and
// adopted by the next thread that asks for one on its key once that thread ended. DeviceChecks'
// lanes (a thread's queue on a device) and deferred batches (a thread's calls waiting for one
// launch) are both kept so: the owner reaches its own without a lock after its first use, any
// thread may walk them all, and none is ever freed (a check may still read one at exit).
//
// T has `int device`, the key it was made for, and `std::atomic<bool> owned`, true while a live
// thread owns it. The registry holds at most kMax of them; kKeys keys a thread may use.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

namespace nanprov::probes {

namespace thread_slots_detail {
// Tells one registry's objects in a thread's cache from an earlier registry's (a restarted
// session in one process).
inline std::atomic<uint64_t> next_registry_id{1};
}  // namespace thread_slots_detail

template <typename T, size_t kKeys, int kMax>
class ThreadSlots {
 public:
  ThreadSlots() : id_(thread_slots_detail::next_registry_id.fetch_add(1)) {}
  ThreadSlots(const ThreadSlots&) = delete;
  ThreadSlots& operator=(const ThreadSlots&) = delete;

  // This thread's T for `key`, at `at` (< kKeys) in the thread's cache: the one it owns, else one
  // whose thread ended, else what `make(room)` returns (called under the registry's lock, `room`
  // false once kMax were made; nullptr makes none). nullptr when none is owned, adopted or made.
  template <typename Make>
  T* get(size_t at, int key, Make&& make) {
    Cache& mine = cache(id_);
    if (T* t = mine.slots[at]) return t;
    T* t = adopt(key, make);
    if (t) {
      mine.slots[at] = t;
      mine.owned[at] = &t->owned;
    }
    return t;
  }

  // Every object made so far, in the order they were made, from any thread.
  template <typename Fn>
  void forEach(Fn&& fn) const {
    for (int i = 0; i < count_.load(std::memory_order_acquire); ++i) {
      if (T* t = slots_[static_cast<size_t>(i)].load(std::memory_order_acquire)) fn(*t);
    }
  }

 private:
  // The objects this thread owns, by key. Released (for adoption) when the thread ends.
  struct Cache {
    uint64_t owner = 0;  // the registry they belong to
    std::array<std::atomic<bool>*, kKeys> owned{};
    std::array<T*, kKeys> slots{};
    ~Cache() {
      for (std::atomic<bool>* o : owned) {
        if (o) o->store(false, std::memory_order_release);
      }
    }
  };
  static Cache& cache(uint64_t id) {
    static thread_local Cache t_cache;
    if (t_cache.owner != id) {
      t_cache = {};
      t_cache.owner = id;
    }
    return t_cache;
  }

  template <typename Make>
  T* adopt(int key, Make& make) {
    std::lock_guard<std::mutex> lock(mu_);  // only around adopting or making; no other lock is taken inside it
    // One whose thread ended: it has one owner again, this thread.
    for (int i = 0; i < count_.load(std::memory_order_acquire); ++i) {
      T* t = slots_[static_cast<size_t>(i)].load(std::memory_order_acquire);
      bool unowned = false;
      if (t->device == key && t->owned.compare_exchange_strong(unowned, true)) return t;
    }
    const int index = count_.load(std::memory_order_relaxed);
    T* t = make(index < kMax);
    if (!t) return nullptr;
    slots_[static_cast<size_t>(index)].store(t, std::memory_order_release);
    count_.store(index + 1, std::memory_order_release);
    return t;
  }

  const uint64_t id_;
  std::array<std::atomic<T*>, static_cast<size_t>(kMax)> slots_{};
  std::atomic<int> count_{0};
  std::mutex mu_;
};

}  // namespace nanprov::probes
