#include "store/small_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace nanprov::store {

StatusOr<std::optional<std::string>> readSmallFile(const std::string& path, int64_t max_bytes) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) return std::optional<std::string>();
    if (errno == EACCES) return Status::Error(path + ": permission denied");
    return Status::Error(path + ": " + std::strerror(errno));
  }
  struct stat st{};
  std::string why;
  if (fstat(fd, &st) != 0) why = std::strerror(errno);
  else if (!S_ISREG(st.st_mode)) why = "not a regular file";
  else if (st.st_size > max_bytes) why = std::to_string(st.st_size >> 20) + " MiB, more than a run file holds";
  std::string text;
  if (why.empty()) {
    text.resize(static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (got < text.size()) {
      ssize_t n = ::read(fd, text.data() + got, text.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    text.resize(got);
  }
  ::close(fd);
  if (!why.empty()) return Status::Error(path + ": " + why);
  return std::optional<std::string>(std::move(text));
}

nlohmann::json readJsonFile(const std::string& path, int64_t max_bytes) {
  auto text = readSmallFile(path, max_bytes);
  if (!text.ok() || !*text) return nlohmann::json::value_t::discarded;
  return nlohmann::json::parse(**text, nullptr, /*allow_exceptions=*/false);
}

}  // namespace nanprov::store
