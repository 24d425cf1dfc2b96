#include "store/job.h"

#include <filesystem>
#include <optional>
#include <utility>
#include <vector>

#include "store/rank_store.h"

namespace nanprov {
namespace {

// What every rank store of one job says alike.
struct JobIdentity {
  std::string run_id, master, world_size;
  bool operator==(const JobIdentity&) const = default;
};

std::string metaOr(const RankInfo& info, const std::string& key, const std::string& none) {
  auto it = info.meta.find(key);
  return it == info.meta.end() || it->second.empty() ? none : it->second;
}

// The identity the stores of `dir` record, or nullopt when it holds none; an error when a store
// cannot be read or two of its stores disagree.
StatusOr<std::optional<std::pair<JobIdentity, std::string>>> identityOf(const std::string& dir) {
  auto paths = rankStorePaths(dir);
  if (!paths.ok()) return paths.status();
  std::optional<std::pair<JobIdentity, std::string>> found;
  for (const std::string& path : *paths) {
    RankInfo info;
    auto db = openRankStore(path, &info);
    if (!db.ok()) return db.status();
    JobIdentity id{metaOr(info, "launcher_run_id", "(none)"), metaOr(info, "master", "(none)"),
                   metaOr(info, "world_size", "1")};
    if (!found) found.emplace(std::move(id), path);
    else if (!(found->first == id)) return Status::Error(path + " and " + found->second + " are stores of two jobs");
  }
  return found;
}

}  // namespace

Status checkOneJob(const RunDirs& dirs) {
  std::optional<std::pair<JobIdentity, std::string>> first;
  for (size_t i = 0; i < dirs.all.size(); ++i) {
    const std::string& dir = dirs.all[i];
    for (size_t j = 0; j < i; ++j) {
      std::error_code ec;
      if (dirs.all[j] == dir || std::filesystem::equivalent(dirs.all[j], dir, ec)) return Status::Error(dir + " is given twice");
    }
    auto id = identityOf(dir);
    if (!id.ok()) return id.status();
    if (!*id) continue;
    if (!first) {
      first.emplace((*id)->first, dir);
      continue;
    }
    const JobIdentity& a = first->first;
    const JobIdentity& b = (*id)->first;
    std::string differs = a.run_id != b.run_id ? "launcher run id " + b.run_id + ", not " + a.run_id
                          : a.master != b.master ? "rendezvous master " + b.master + ", not " + a.master
                          : a.world_size != b.world_size ? "world size " + b.world_size + ", not " + a.world_size
                                                         : "";
    if (!differs.empty()) {
      return Status::Error(dir + " is another job's run directory than " + first->second + " (" + differs +
                           "); give the directories of one job");
    }
  }
  // No rank twice: the union of the directories' stores says which rank is in two of them.
  auto paths = rankStorePaths(dirs);
  return paths.ok() ? Status::Ok() : paths.status();
}

}  // namespace nanprov
