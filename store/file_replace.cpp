#include "store/file_replace.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace nanprov {

Status replaceFile(const std::string& path, const std::string& what, const std::function<void(std::ostream&)>& write,
                   const std::string& suffix) {
  // Named for this process and call: two writers of one file (two `replay --audit` of a capture)
  // each rename a whole file of their own, and the last one wins.
  static std::atomic<int64_t> writes{0};
  const std::string aside = path + suffix + "." + std::to_string(getpid()) + "." + std::to_string(writes++);
  {
    errno = 0;
    std::ofstream out(aside, std::ios::binary | std::ios::trunc);
    // The path asked for, and why: the name of the file aside is nanprov's business.
    if (!out) return Status::Error("cannot write " + what + " " + path + (errno ? std::string(": ") + std::strerror(errno) : ""));
    write(out);
    if (!out.flush()) {
      out.close();
      std::error_code ignored;
      std::filesystem::remove(aside, ignored);
      return Status::Error("cannot write " + what + " " + aside + " (disk full?)");
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

}  // namespace nanprov
