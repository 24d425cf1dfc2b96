#include "store/mapped_counters.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <vector>

namespace nanprov::store {

StatusOr<std::unique_ptr<MappedCounters>> MappedCounters::open(const std::string& path, size_t slots) {
  const off_t bytes = static_cast<off_t>(slots * sizeof(int64_t));
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return Status::Error(path + ": " + std::strerror(errno));
  struct stat st{};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::Error(path + ": not a regular file of " + std::to_string(bytes) + " bytes");
  }
  // Zeros written, not a hole made by ftruncate: a hole's page is allocated by the first store
  // through the mapping, and on a full disk that store is a SIGBUS in the training.
  if (st.st_size < bytes) {
    const std::vector<char> zeros(static_cast<size_t>(bytes - st.st_size), 0);
    if (pwrite(fd, zeros.data(), zeros.size(), st.st_size) != static_cast<ssize_t>(zeros.size())) {
      const int err = errno;
      ::close(fd);
      return Status::Error(path + ": " + std::strerror(err));
    }
  }
  void* mapped = mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);  // the mapping keeps the file
  if (mapped == MAP_FAILED) return Status::Error(path + ": mmap: " + std::strerror(errno));
  return std::unique_ptr<MappedCounters>(new MappedCounters(static_cast<int64_t*>(mapped), slots));
}

MappedCounters::~MappedCounters() { munmap(counts_, slots_ * sizeof(int64_t)); }

void MappedCounters::add(size_t slot, int64_t n) {
  std::atomic_ref<int64_t>(counts_[slot]).fetch_add(n, std::memory_order_relaxed);
}

void MappedCounters::set(size_t slot, int64_t value) {
  std::atomic_ref<int64_t>(counts_[slot]).store(value, std::memory_order_relaxed);
}

void MappedCounters::keepSmallest(size_t slot, int64_t value) {
  std::atomic_ref<int64_t> at(counts_[slot]);
  int64_t held = at.load(std::memory_order_relaxed);
  while ((held == 0 || value < held) && !at.compare_exchange_weak(held, value, std::memory_order_relaxed)) {
  }
}

int64_t MappedCounters::get(size_t slot) const {
  return std::atomic_ref<int64_t>(counts_[slot]).load(std::memory_order_relaxed);
}

std::optional<std::vector<int64_t>> readMappedCounters(const std::string& path, size_t slots) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return std::nullopt;
  struct stat st{};
  std::vector<int64_t> counts(slots, -1);
  const ssize_t bytes = static_cast<ssize_t>(slots * sizeof(int64_t));
  bool ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == bytes &&
            pread(fd, counts.data(), static_cast<size_t>(bytes), 0) == bytes &&
            std::all_of(counts.begin(), counts.end(), [](int64_t c) { return c >= 0; });
  ::close(fd);
  return ok ? std::optional(std::move(counts)) : std::nullopt;
}

}  // namespace nanprov::store
