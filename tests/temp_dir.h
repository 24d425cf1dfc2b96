// A fresh, empty directory per test and process, so tests can run in parallel.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

namespace nanprov::testing {

inline std::filesystem::path freshDir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("nanprov-test-" + name + "-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace nanprov::testing
