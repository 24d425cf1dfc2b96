#include "store/call_tally.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

namespace nanprov {

StatusOr<std::unique_ptr<CallTally>> CallTally::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return Status::Error(path + ": " + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
      (st.st_size < static_cast<off_t>(sizeof(int64_t)) && ftruncate(fd, sizeof(int64_t)) != 0)) {
    ::close(fd);
    return Status::Error(path + ": not a regular file of " + std::to_string(sizeof(int64_t)) + " bytes");
  }
  void* mapped = mmap(nullptr, sizeof(int64_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);  // the mapping keeps the file
  if (mapped == MAP_FAILED) return Status::Error(path + ": mmap: " + std::strerror(errno));
  return std::unique_ptr<CallTally>(new CallTally(static_cast<int64_t*>(mapped)));
}

CallTally::~CallTally() { munmap(count_, sizeof(int64_t)); }

void CallTally::add(int64_t n) { std::atomic_ref<int64_t>(*count_).fetch_add(n, std::memory_order_relaxed); }

std::optional<int64_t> readCallTally(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return std::nullopt;
  struct stat st {};
  int64_t count = -1;
  bool ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == sizeof(int64_t) &&
            pread(fd, &count, sizeof count, 0) == sizeof count && count >= 0;
  ::close(fd);
  return ok ? std::optional<int64_t>(count) : std::nullopt;
}

}  // namespace nanprov
