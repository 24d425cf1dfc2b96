#include "store/run_dir.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string_view>
#include <tuple>

#include "base/numbers.h"
#include "store/run_file.h"
#include "store/small_file.h"
#include "store/sqlite_db.h"

namespace nanprov::store {
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

namespace {

constexpr std::string_view kRankPrefix = "rank-", kProcessPrefix = "process-", kStoreSuffix = ".sqlite",
                           kTallySuffix = ".tally", kAuditProgressSuffix = ".audit-progress",
                           kUnrecordedSuffix = ".unrecorded", kWorkerCallsSuffix = ".worker-calls";

std::string rankFileName(int rank, std::string_view suffix) {
  return std::string(kRankPrefix) + std::to_string(rank) + std::string(suffix);
}

bool namedForRank(const std::string& name, std::string_view suffix) {
  return name.size() > kRankPrefix.size() + suffix.size() && name.starts_with(kRankPrefix) && name.ends_with(suffix);
}

bool namedLikeStore(const std::string& name) { return namedForRank(name, kStoreSuffix); }

// The rank in "rank-<r><suffix>", spelt as nanprov spells it: "rank-00" is not rank 0's.
std::optional<int> rankOfName(const std::string& name, std::string_view suffix) {
  if (!namedForRank(name, suffix)) return std::nullopt;
  std::string digits = name.substr(kRankPrefix.size(), name.size() - kRankPrefix.size() - suffix.size());
  auto rank = parseInteger(digits, 0, kMaxRank);
  if (!rank || std::to_string(*rank) != digits) return std::nullopt;
  return static_cast<int>(*rank);
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

// Whether the file starts as every SQLite database does.
bool holdsDatabase(const fs::path& path) {
  static constexpr char kHeader[] = "SQLite format 3";  // and its terminating NUL: 16 bytes
  char head[sizeof kHeader] = {};
  std::ifstream in(path, std::ios::binary);
  return in.read(head, sizeof head) && std::equal(head, head + sizeof head, kHeader);
}

// "process-<pid>.sqlite": a store made before its process knew its rank.
bool namedForProcess(const std::string& name) {
  if (!name.starts_with(kProcessPrefix) || !name.ends_with(kStoreSuffix)) return false;
  std::string digits = name.substr(kProcessPrefix.size(), name.size() - kProcessPrefix.size() - kStoreSuffix.size());
  auto pid = parseInteger(digits, 1, INT32_MAX);
  return pid && std::to_string(*pid) == digits;
}

// The rank a process store's meta gives: the rank its process learnt, else the environment's
// guess it started with. nullopt when it says neither or cannot be read.
std::optional<int> rankInProcessStore(const fs::path& path) {
  auto db = sqlite::open(path.string(), sqlite::Mode::kReadOnly);
  if (!db.ok()) return std::nullopt;
  auto meta = sqlite::prepare(
      db->get(), "SELECT value FROM meta WHERE key IN ('rank', 'rank_guess') ORDER BY key = 'rank' DESC LIMIT 1");
  if (!meta.ok() || sqlite3_step(meta->get()) != SQLITE_ROW) return std::nullopt;
  const unsigned char* text = sqlite3_column_text(meta->get(), 0);
  auto rank = parseInteger(text ? reinterpret_cast<const char*>(text) : "", 0, kMaxRank);
  return rank ? std::optional<int>(static_cast<int>(*rank)) : std::nullopt;
}

}  // namespace

std::string rankStoreName(int rank) { return rankFileName(rank, kStoreSuffix); }
std::string processStoreName(int pid) {
  return std::string(kProcessPrefix) + std::to_string(pid) + std::string(kStoreSuffix);
}
std::string processTallyName(int pid) {
  return std::string(kProcessPrefix) + std::to_string(pid) + std::string(kTallySuffix);
}
std::string callTallyName(int rank) { return rankFileName(rank, kTallySuffix); }
std::string auditProgressName(int rank) { return rankFileName(rank, kAuditProgressSuffix); }
std::string workerCallsName(int rank) { return rankFileName(rank, kWorkerCallsSuffix); }
std::string unrecordedNoteName(int rank) { return rankFileName(rank, kUnrecordedSuffix); }

// A rank that could not write its store and whose note of why is empty: the note's own write
// failed, most often because the disk is full, which its free space then says.
static std::string whyNothingNoted(const std::string& dir) {
  constexpr uint64_t kNoRoom = 64 << 10;  // less than a store's schema and first batch
  struct statvfs disk{};
  if (statvfs(dir.c_str(), &disk) == 0 && static_cast<uint64_t>(disk.f_bavail) * disk.f_frsize < kNoRoom) {
    return "its store could not be written; the disk holding " + dir + " is full now";
  }
  return "its store could not be written";
}

std::map<int, std::string> unrecordedRanks(const std::string& dir) {
  std::map<int, std::string> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    auto rank = rankOfName(entry.path().filename().string(), kUnrecordedSuffix);
    if (!rank) continue;
    auto text = readSmallFile(entry.path().string(), 4096);
    std::string why = text.ok() && *text ? **text : "";
    while (!why.empty() && (why.back() == '\n' || why.back() == '\r')) why.pop_back();
    out[*rank] = why.empty() ? whyNothingNoted(dir) : why;
  }
  return out;
}

std::optional<int> rankOfStoreName(const std::string& filename) { return rankOfName(filename, kStoreSuffix); }
namespace {

// The regular files in `dir` named rank-<r><suffix>: rank → path.
std::map<int, std::string> rankFiles(const std::string& dir, std::string_view suffix) {
  std::map<int, std::string> paths;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::error_code type_ec;
    auto rank = rankOfName(entry.path().filename().string(), suffix);
    if (rank && entry.is_regular_file(type_ec)) paths[*rank] = entry.path().string();
  }
  return paths;
}

}  // namespace

std::map<int, std::string> callTallyPaths(const std::string& dir) { return rankFiles(dir, kTallySuffix); }
std::map<int, std::string> workerCallPaths(const std::string& dir) { return rankFiles(dir, kWorkerCallsSuffix); }

std::string processFileBehind(const std::string& path) {
  const fs::path link(path);
  std::error_code ec;
  if (!fs::is_symlink(fs::symlink_status(link, ec))) return path;
  const std::string target = fs::read_symlink(link, ec).filename().string();
  return !ec && target.starts_with(kProcessPrefix) ? (link.parent_path() / target).string() : path;
}

std::string callTallyPathOf(const std::string& store_path, int rank) {
  const fs::path store(processFileBehind(store_path));
  std::string name = store.filename().string();
  if (namedForProcess(name)) {
    name.replace(name.size() - kStoreSuffix.size(), kStoreSuffix.size(), kTallySuffix);
    return (store.parent_path() / name).string();
  }
  return (store.parent_path() / callTallyName(rank)).string();
}

bool holdsRankStores(const std::string& dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (namedLikeStore(name) || namedForProcess(name)) return true;
  }
  return false;
}

StatusOr<std::vector<std::string>> rankStorePaths(const RunDirs& dirs) {
  std::map<int, std::string> found;
  for (const std::string& dir : dirs.all) {
    std::error_code ec;
    fs::directory_iterator it(dir, ec);
    if (ec == std::errc::permission_denied) return Status::Error("cannot read " + dir + ": permission denied");
    if (ec) continue;
    const std::map<int, std::string> unrecorded = unrecordedRanks(dir);
    std::map<int, std::string> here;
    std::set<std::string> linked;          // process stores a rank's name links to
    std::vector<fs::path> process_stores;  // every process store, linked or not
    for (const auto& entry : it) {
      std::string name = entry.path().filename().string();
      if (namedForProcess(name)) {
        std::error_code type_ec;
        if (entry.is_regular_file(type_ec)) process_stores.push_back(entry.path());
        continue;
      }
      if (!namedLikeStore(name)) continue;
      std::error_code link_ec;
      if (fs::is_symlink(entry.symlink_status(link_ec)))
        linked.insert(fs::read_symlink(entry.path(), link_ec).filename().string());
      std::string path = entry.path().string();
      if (std::string what = notRegularFile(entry.path()); !what.empty()) {
        return Status::Error(path + " is " + what + ", not a store file; remove it (nanprov writes regular files)");
      }
      auto rank = rankOfStoreName(name);
      if (!rank) {
        return Status::Error(path +
                             " is named like a rank store, but not as nanprov names them (rank-<r>.sqlite, r a "
                             "rank number without leading zeros); rename or remove it");
      }
      // A worker of this rank could not create its store because this file was there first: when
      // it is no database at all it is nobody's store, and the rank is read as unrecorded.
      if (unrecorded.count(*rank) && !holdsDatabase(entry.path())) continue;
      here.emplace(*rank, path);
    }
    // A process that died before it learnt its rank left its store under its own name: read it as
    // the rank its meta gives, unless a store of that rank is here (the one that holds it).
    std::sort(process_stores.begin(), process_stores.end());
    for (const fs::path& store : process_stores) {
      if (linked.count(store.filename().string())) continue;
      if (auto rank = rankInProcessStore(store)) here.emplace(*rank, store.string());
    }
    for (auto& [rank, path] : here) {
      auto [slot, fresh] = found.emplace(rank, path);
      if (!fresh) {
        return Status::Error("rank " + std::to_string(rank) + " is in two of the directories given (" + slot->second +
                             " and " + path + "): they are not the directories of one job");
      }
    }
  }
  std::vector<std::string> paths;
  for (auto& [rank, path] : found) paths.push_back(path);
  return paths;
}

StatusOr<std::vector<std::string>> runsNewestFirst(const std::string& root) {
  struct Run {
    int64_t started_ns;
    std::string dir;
  };
  std::vector<Run> runs;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    std::error_code type_ec;
    if (!entry.is_directory(type_ec)) continue;
    const std::string dir = entry.path().string();
    std::optional<int64_t> started = readRunFile(dir).started_ns;
    if (!started) {
      std::error_code time_ec;
      auto written = fs::last_write_time(entry.path() / kRunFileName, time_ec);
      if (time_ec) written = fs::last_write_time(entry.path(), time_ec);
      started = time_ec ? 0
                        : std::chrono::duration_cast<std::chrono::nanoseconds>(
                              std::chrono::file_clock::to_sys(written).time_since_epoch())
                              .count();
    }
    runs.push_back({*started, dir});
  }
  if (ec) return Status::Error("cannot list " + root + ": " + ec.message());
  std::sort(runs.begin(), runs.end(),
            [](const Run& a, const Run& b) { return std::tie(a.started_ns, a.dir) > std::tie(b.started_ns, b.dir); });
  std::vector<std::string> out;
  for (Run& r : runs) out.push_back(std::move(r.dir));
  return out;
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
  auto listed = runsNewestFirst(kDefaultRunsRoot);
  const std::vector<std::string> runs = listed.ok() ? *listed : std::vector<std::string>{};
  if (runs.empty()) {
    return Status::Error(std::string("no runs under ./") + kDefaultRunsRoot +
                         "; pass a run directory, or start one with `nanprov run -- python train.py`");
  }
  // The newest run that recorded data: a newer one whose command failed before any store existed
  // would only answer "nothing recorded".
  for (const std::string& run : runs) {
    if (holdsRankStores(run)) return run;
  }
  return runs.front();
}

}  // namespace nanprov::store
