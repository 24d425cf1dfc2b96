// One job's run directories: a multi-node job run under `nanprov run` on each node leaves one
// run directory per node (each on its node's local disk). Readers take them together only when
// they are one job's: the same launcher run id (Slurm's job and step, else torchrun's --rdzv-id), the
// same rendezvous master and world size, and no rank in two of them. Where neither a run id nor a
// master was recorded (plain `python`, a hand-written launcher), processes that started more than
// 15 minutes apart are two jobs.
#pragma once

#include <string>

#include "base/status.h"
#include "store/run_dir.h"

namespace nanprov::store {

struct RunData;

// The job's id as its ranks recorded it (meta launcher_run_id: "slurm:<job>.<step>" where srun
// started them, else torchrun's --rdzv-id); "" when none did. Run directories of one job share it.
std::string jobIdOf(const RunData& run);

// Ok when `dirs` can be read as one job; otherwise one line naming the directory that is another
// job's and what differs. A directory without stores has nothing to compare and is accepted.
Status checkOneJob(const RunDirs& dirs);

}  // namespace nanprov::store
