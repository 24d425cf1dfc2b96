// Files other processes may read while they are written (captures, a replay's kernel list) are
// written aside and renamed into place, so a reader sees the old file or the whole new one.
#pragma once

#include <functional>
#include <ostream>
#include <string>

#include "base/status.h"

namespace nanprov::store {

// Writes `path` through `write` into `path` + `suffix`, then renames it over `path`. `what` names
// the file in errors ("cannot write capture PATH: No space left on device"; "" for the path alone).
Status replaceFile(const std::string& path, const std::string& what, const std::function<void(std::ostream&)>& write,
                   const std::string& suffix = ".partial");

}  // namespace nanprov::store
