#include "probes/core/process_rank.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "base/env.h"

namespace nanprov::probes {
namespace {

// The first of `names` that is set, as a number of at least `min`; -1 when none is.
int64_t firstSet(std::initializer_list<const char*> names, int64_t min) {
  for (const char* name : names) {
    if (int64_t v = envInteger(name, -1, min); v >= min) return v;
  }
  return -1;
}

}  // namespace

// RANK where the launcher set it (torchrun, accelerate, deepspeed). Lightning's own launcher
// starts local ranks 1..N-1 with LOCAL_RANK, NODE_RANK and WORLD_SIZE only, and passes the global
// rank to init_process_group itself: the rank is then NODE_RANK x LOCAL_WORLD_SIZE + LOCAL_RANK
// where the processes per node are known, and LOCAL_RANK on node 0. srun starts tasks with
// SLURM_PROCID only; MPI launchers with their own variables. All of it is a guess: the process
// group, once it exists, says (Session::learnRank).
RankEnv rankFromEnvironment() {
  RankEnv env;
  const int64_t global = firstSet({"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"}, 0);
  const int64_t local = firstSet({"LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"}, 0);
  const int64_t world = firstSet({"WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}, 1);
  env.said = global >= 0 || local >= 0 || world > 1;
  env.world_size = static_cast<int>(std::max<int64_t>(world, 1));
  if (global >= 0 || local < 0) {
    env.rank = static_cast<int>(std::max<int64_t>(global, 0));
  } else {
    const int64_t node = envInteger("NODE_RANK", envInteger("GROUP_RANK", 0, 0), 0);
    const int64_t per_node = envInteger("LOCAL_WORLD_SIZE", 0, 1);
    env.rank = static_cast<int>(per_node > 0 ? node * per_node + local : local);
  }
  env.local_rank = static_cast<int>(local >= 0 ? local : env.rank);
  return env;
}

const char* rankSourceName(RankSource s) {
  switch (s) {
    case RankSource::kGuess: return "guess";
    case RankSource::kProcessGroup: return "process_group";
    case RankSource::kSettled: return "environment";
  }
  return "guess";
}

bool RankLink::pointsHere(const std::string& path) const {
  std::error_code ec;
  return std::filesystem::read_symlink(path, ec).string() == process_name_ && !ec;
}

Status RankLink::link(const std::string& rank_name) {
  if (rank_name == rank_name_) return Status::Ok();
  const std::string path = (std::filesystem::path(dir_) / rank_name).string();
  // Relative: the run directory may be copied or mounted elsewhere.
  if (symlink(process_name_.c_str(), path.c_str()) != 0 && !(errno == EEXIST && pointsHere(path))) {
    if (errno == EEXIST) {
      return Status::Error(rank_name + " already exists: another process of this run holds this rank");
    }
    return Status::Error("cannot link " + rank_name + " to " + process_name_ + ": " + std::strerror(errno));
  }
  if (linked()) {
    const std::string old = (std::filesystem::path(dir_) / rank_name_).string();
    if (pointsHere(old)) unlink(old.c_str());
  }
  rank_name_ = rank_name;
  return Status::Ok();
}

void RankLink::adopt() {
  if (!linked()) return;
  const std::filesystem::path dir(dir_);
  const std::string path = (dir / rank_name_).string();
  if (pointsHere(path)) std::rename((dir / process_name_).c_str(), path.c_str());
}

}  // namespace nanprov::probes
