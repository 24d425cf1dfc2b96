#include "store/file_replace.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace nanprov::store {

Status replaceFile(const std::string& path, const std::string& what, const std::function<void(std::ostream&)>& write,
                   const std::string& suffix) {
  // Named for this process and call: two writers of one file (two `replay --audit` of a capture)
  // each rename a whole file of their own, and the last one wins.
  static std::atomic<int64_t> writes{0};
  const std::string aside = path + suffix + "." + std::to_string(getpid()) + "." + std::to_string(writes++);
  // The path asked for, and why (the failed write's errno: "No space left on device"); the name
  // of the file aside is nanprov's business.
  auto cannotWrite = [&](int err) {
    return Status::Error("cannot write " + (what.empty() ? "" : what + " ") + path + ": " +
                         (err ? std::strerror(err) : "the disk may be full"));
  };
  {
    errno = 0;
    std::ofstream out(aside, std::ios::binary | std::ios::trunc);
    if (!out) return cannotWrite(errno);
    write(out);
    errno = 0;
    const bool flushed = static_cast<bool>(out.flush());
    const int err = errno;
    out.close();
    if (!flushed || out.fail()) {
      std::error_code ignored;
      std::filesystem::remove(aside, ignored);
      return cannotWrite(err ? err : errno);
    }
  }
  std::error_code ec;
  std::filesystem::rename(aside, path, ec);
  if (ec) {
    std::error_code ignored;  // the rename's error is the one to tell
    std::filesystem::remove(aside, ignored);
    return Status::Error("cannot move " + what + " into place at " + path + ": " + ec.message());
  }
  return Status::Ok();
}

}  // namespace nanprov::store
