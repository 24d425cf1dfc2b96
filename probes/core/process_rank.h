// Which rank a training process is. The truth is its default process group's (torch.distributed),
// which the bootstrap reports as the group comes up, however it came up: torchrun, srun,
// torch.multiprocessing.spawn, Lightning, a hand-written launcher, init_device_mesh. Until then
// the environment's guess stands in (RANK, SLURM_PROCID...), but it never names a store for good:
// a process that records before it knows its rank writes under its own name
// (store/run_dir.h processStoreName), and the rank's name is linked to that file once the rank is
// known (RankLink).
#pragma once

#include <string>

#include "base/status.h"

namespace nanprov::probes {

struct RankEnv {
  int rank = 0, local_rank = 0, world_size = 1;
  bool said = false;  // some launcher variable said it; false: a process on its own, rank 0 of 1
};
// The launchers' variables: torchrun's RANK (and Lightning's NODE_RANK x LOCAL_WORLD_SIZE +
// LOCAL_RANK), else Slurm's task variables (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID), else
// Open MPI's and PMI's.
RankEnv rankFromEnvironment();

// How the process knows its rank.
enum class RankSource {
  kGuess,         // not yet: the environment's guess, nothing named by it for good
  kProcessGroup,  // from its default process group
  kSettled,       // it started no group (by its first optimizer step, or its exit): the guess
};
const char* rankSourceName(RankSource s);  // "guess" | "process_group" | "environment"

// "rank-<r>.sqlite" (or .tally) as a link to a file written under the process's own name, in
// one run directory. link() claims the name, once and exclusively: a second process claiming the
// same rank is refused, never merged. adopt() gives the file the rank's name for good, at exit,
// when the name still links to it.
class RankLink {
 public:
  RankLink() = default;
  RankLink(std::string dir, std::string process_name) : dir_(std::move(dir)), process_name_(std::move(process_name)) {}

  // Links `rank_name` to the process's file; a link made before (to another rank) is removed.
  Status link(const std::string& rank_name);
  // Renames the process's file over its link. No-op when not linked, or the link is not ours.
  void adopt();
  bool linked() const { return !rank_name_.empty(); }
  const std::string& processName() const { return process_name_; }

 private:
  bool pointsHere(const std::string& path) const;

  std::string dir_, process_name_, rank_name_;
};

}  // namespace nanprov::probes
