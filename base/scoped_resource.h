// One RAII owner for every C handle the project holds (sqlite3*, sqlite3_stmt*, CUDA events and
// device and host-mapped memory), after perfetto's ScopedResource. The CUPTI subscriber is the one
// exception, and tracer/cupti_tracer.cpp says why.
#pragma once

#include <utility>

namespace nanprov {

template <typename T, auto CloseFn, T Invalid = T{}>
class ScopedResource {
 public:
  ScopedResource() = default;
  explicit ScopedResource(T handle) : handle_(handle) {}
  ScopedResource(const ScopedResource&) = delete;
  ScopedResource& operator=(const ScopedResource&) = delete;
  ScopedResource(ScopedResource&& other) noexcept : handle_(std::exchange(other.handle_, Invalid)) {}
  ScopedResource& operator=(ScopedResource&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = std::exchange(other.handle_, Invalid);
    }
    return *this;
  }
  ~ScopedResource() { reset(); }

  T get() const { return handle_; }
  explicit operator bool() const { return handle_ != Invalid; }
  void reset(T handle = Invalid) {
    if (handle_ != Invalid) CloseFn(handle_);
    handle_ = handle;
  }

 private:
  T handle_ = Invalid;
};

}  // namespace nanprov
