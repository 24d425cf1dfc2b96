#include "store/run_dir.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <map>
#include <string_view>

#include <unistd.h>

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

namespace {

constexpr std::string_view kStorePrefix = "rank-", kStoreSuffix = ".sqlite";

bool namedLikeStore(const std::string& name) {
  return name.size() > kStorePrefix.size() + kStoreSuffix.size() && name.starts_with(kStorePrefix) &&
         name.ends_with(kStoreSuffix);
}

// What a path is when it is not a regular file, in words; "" for a regular file.
std::string notRegularFile(const fs::path& path) {
  std::error_code ec;
  fs::file_status st = fs::status(path, ec);
  if (ec && fs::is_symlink(fs::symlink_status(path, ec))) return "a link to nothing";
  switch (st.type()) {
    case fs::file_type::regular: return "";
    case fs::file_type::directory: return "a directory";
    case fs::file_type::fifo: return "a FIFO";
    case fs::file_type::socket: return "a socket";
    case fs::file_type::block:
    case fs::file_type::character: return "a device";
    case fs::file_type::not_found: return "gone";
    default: return "not a regular file";
  }
}

}  // namespace

std::optional<int> rankOfStoreName(const std::string& filename) {
  if (!namedLikeStore(filename)) return std::nullopt;
  std::string digits = filename.substr(kStorePrefix.size(), filename.size() - kStorePrefix.size() - kStoreSuffix.size());
  auto rank = parseInteger(digits, 0, kMaxRank);
  // Only the name nanprov writes: "rank-00" is not rank 0's store, whatever it holds.
  if (!rank || std::to_string(*rank) != digits) return std::nullopt;
  return static_cast<int>(*rank);
}

bool holdsRankStores(const std::string& dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (namedLikeStore(entry.path().filename().string())) return true;
  }
  return false;
}

StatusOr<std::vector<std::string>> rankStorePaths(const std::string& dir) {
  std::map<int, std::string> found;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec == std::errc::permission_denied) return Status::Error("cannot read " + dir + ": permission denied");
  if (ec) return std::vector<std::string>{};
  for (const auto& entry : it) {
    std::string name = entry.path().filename().string();
    if (!namedLikeStore(name)) continue;
    std::string path = entry.path().string();
    if (std::string what = notRegularFile(entry.path()); !what.empty()) {
      return Status::Error(path + " is " + what + ", not a store file; remove it (nanprov writes regular files)");
    }
    auto rank = rankOfStoreName(name);
    if (!rank) {
      return Status::Error(path + " is named like a rank store, but not as nanprov names them (rank-<r>.sqlite, r a "
                           "rank number without leading zeros); rename or remove it");
    }
    if (access(path.c_str(), R_OK) != 0 && errno == EACCES) {
      return Status::Error(path + ": permission denied; make it readable (chmod u+r) or read the run as its owner");
    }
    found.emplace(*rank, path);
  }
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
    if (holdsRankStores(run)) return run;
  }
  return runs.front();
}

}  // namespace nanprov
