#include "store/job.h"

#include <filesystem>
#include <optional>
#include <utility>
#include <vector>

#include "base/numbers.h"
#include "base/text.h"
#include "store/meta_values.h"
#include "store/rank_store.h"
#include "store/reader.h"

namespace nanprov::store {
namespace {

// What every rank store of one job says alike.
struct JobIdentity {
  std::string run_id, master, world_size;
  bool operator==(const JobIdentity&) const = default;
};

// Without a launcher run id and a rendezvous master (plain `python`, a hand-written launcher),
// only time tells two jobs apart: a job's processes start within minutes of each other, and two
// runs of one script usually hours apart.
constexpr int64_t kMostStartSpreadNs = int64_t{15} * 60 * 1'000'000'000;

struct DirIdentity {
  JobIdentity job;
  std::string path;                   // a store that says it
  std::optional<int64_t> started_ns;  // the earliest of its stores' starts, where they say
};

std::string metaOr(const RankInfo& info, const std::string& key, const std::string& none) {
  auto it = info.meta.find(key);
  return it == info.meta.end() || it->second.empty() ? none : it->second;
}

// The identity the stores of `dir` record, or nullopt when it holds none; an error when a store
// cannot be read or two of its stores disagree.
StatusOr<std::optional<DirIdentity>> identityOf(const std::string& dir) {
  NANPROV_ASSIGN_OR_RETURN(auto paths, rankStorePaths(dir));
  std::optional<DirIdentity> found;
  for (const std::string& path : paths) {
    RankInfo info;
    NANPROV_ASSIGN_OR_RETURN(auto db, openRankStore(path, &info));
    JobIdentity id{metaOr(info, "launcher_run_id", "(none)"), metaOr(info, "master", "(none)"),
                   metaOr(info, "world_size", "1")};
    std::optional<int64_t> started = parseInteger(metaOr(info, "started_ns", ""), 0, INT64_MAX);
    if (!found) found = DirIdentity{std::move(id), path, started};
    else if (!(found->job == id)) return Status::Error(path + " and " + found->path + " are stores of two jobs");
    else if (started && (!found->started_ns || *started < *found->started_ns)) found->started_ns = started;
  }
  return found;
}

// "Slurm job 4243.0, not 4242.0" for the ids probes/core/session.cpp records from SLURM_JOB_ID
// and SLURM_STEP_ID, else "launcher run id B, not A".
std::string runIdsDiffer(const std::string& b, const std::string& a) {
  constexpr std::string_view kSlurm = "slurm:";
  if (b.starts_with(kSlurm) && a.starts_with(kSlurm))
    return "Slurm job " + b.substr(kSlurm.size()) + ", not " + a.substr(kSlurm.size());
  return "launcher run id " + b + ", not " + a;
}

// "3.2 h", "41 min": how far apart two starts were.
std::string apart(int64_t ns) {
  const double minutes = static_cast<double>(ns) / 60e9;
  return minutes >= 120 ? shortNumber(minutes / 60) + " h" : shortNumber(minutes) + " min";
}

}  // namespace

std::string jobIdOf(const RunData& run) {
  for (const RankInfo& r : run.ranks) {
    if (const std::string* id = metaText(r.meta, "launcher_run_id"); id && !id->empty()) return *id;
  }
  return "";
}

Status checkOneJob(const RunDirs& dirs) {
  std::optional<std::pair<DirIdentity, std::string>> first;
  for (size_t i = 0; i < dirs.all.size(); ++i) {
    const std::string& dir = dirs.all[i];
    for (size_t j = 0; j < i; ++j) {
      std::error_code ec;
      if (dirs.all[j] == dir || std::filesystem::equivalent(dirs.all[j], dir, ec))
        return Status::Error(dir + " is given twice");
    }
    NANPROV_ASSIGN_OR_RETURN(auto id, identityOf(dir));
    if (!id) continue;
    if (!first) {
      first.emplace(*id, dir);
      continue;
    }
    const JobIdentity& a = first->first.job;
    const JobIdentity& b = id->job;
    const std::optional<int64_t> a_start = first->first.started_ns, b_start = id->started_ns;
    const bool anonymous = a.run_id == "(none)" && a.master == "(none)";
    const int64_t gap = a_start && b_start ? (*a_start > *b_start ? *a_start - *b_start : *b_start - *a_start) : 0;
    std::string differs = a.run_id != b.run_id           ? runIdsDiffer(b.run_id, a.run_id)
                          : a.master != b.master         ? "rendezvous master " + b.master + ", not " + a.master
                          : a.world_size != b.world_size ? "world size " + b.world_size + ", not " + a.world_size
                          : anonymous && gap > kMostStartSpreadNs ? "its processes started " + apart(gap) +
                                                                        " apart from those, and no launcher run id or "
                                                                        "rendezvous master says they are one job"
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

}  // namespace nanprov::store
