#include "store/file_replace.h"

#include <filesystem>
#include <fstream>

namespace nanprov {

Status replaceFile(const std::string& path, const std::string& what, const std::function<void(std::ostream&)>& write,
                   const std::string& suffix) {
  const std::string aside = path + suffix;
  {
    std::ofstream out(aside, std::ios::binary | std::ios::trunc);
    if (!out) return Status::Error("cannot write " + what + " " + aside);
    write(out);
    if (!out.flush()) return Status::Error("cannot write " + what + " " + aside + " (disk full?)");
  }
  std::error_code ec;
  std::filesystem::rename(aside, path, ec);
  if (ec) return Status::Error("cannot move " + what + " into place at " + path + ": " + ec.message());
  return Status::Ok();
}

}  // namespace nanprov
