#include "store/run_dir.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <regex>

#include "base/numbers.h"

namespace nanprov {
namespace fs = std::filesystem;

std::string newRunDirName(const std::string& root) {
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%S", &tm);
  char full[80];
  std::snprintf(full, sizeof full, "%s.%03dZ", buf, static_cast<int>(ms));
  return (fs::path(root) / full).string();
}

std::string rankStoreName(int rank) { return "rank-" + std::to_string(rank) + ".sqlite"; }

std::vector<std::string> rankStorePaths(const std::string& dir) {
  static const std::regex kName(R"(rank-(\d+)\.sqlite)");
  std::vector<std::pair<int, std::string>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    std::string name = entry.path().filename().string();
    if (!std::regex_match(name, m, kName)) continue;
    // Only regular files: opening a FIFO named like a store would block every command forever.
    std::error_code type_ec;
    if (!entry.is_regular_file(type_ec)) continue;
    if (auto rank = parseInteger(m[1].str(), 0, kMaxRank)) found.emplace_back(static_cast<int>(*rank), entry.path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> paths;
  for (auto& [rank, path] : found) paths.push_back(path);
  return paths;
}

StatusOr<std::string> resolveRunDir(const std::string& given) {
  std::error_code ec;
  if (!given.empty()) {
    if (!fs::exists(given, ec)) return Status::Error("no such run directory: " + given);
    if (!fs::is_directory(given, ec)) {
      return Status::Error(given + " is not a run directory (expected the folder `nanprov run` wrote)");
    }
    return given;
  }
  std::vector<std::string> runs;
  for (const auto& entry : fs::directory_iterator(kDefaultRunsRoot, ec)) {
    std::error_code type_ec;
    if (entry.is_directory(type_ec)) runs.push_back(entry.path().string());
  }
  if (runs.empty()) {
    return Status::Error(std::string("no runs under ./") + kDefaultRunsRoot +
                         "; pass a run directory, or start one with `nanprov run -- python train.py`");
  }
  // Names are UTC timestamps. The newest run that recorded data: a newer one whose command failed
  // before any store existed would only answer "nothing recorded".
  std::sort(runs.rbegin(), runs.rend());
  for (const std::string& run : runs) {
    if (!rankStorePaths(run).empty()) return run;
  }
  return runs.front();
}

}  // namespace nanprov
