// `nanprov run` as one task of a Slurm job step: `srun nanprov run --out DIR -- python train.py`
// starts one `nanprov run` per task, all into DIR (shared) or into each node's own DIR. Each task
// joins the directory with a run file of its own (store/task_run_files.h), and at its end waits
// for the other tasks there, so the report it prints covers their ranks too.
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace nanprov::cli {

struct SlurmTask {
  std::string job;              // "<SLURM_JOB_ID>.<SLURM_STEP_ID>"
  int task = 0;                 // SLURM_PROCID
  int tasks = 1;                // SLURM_NTASKS: of the whole step, on every node
  int node = 0;                 // SLURM_NODEID
  nlohmann::json json() const;  // run file's "slurm" entry
};

// Set when srun started this process: SLURM_JOB_ID, SLURM_PROCID and a real step's SLURM_STEP_ID.
// A batch script's own process is no task: its `nanprov run -- srun ...` owns the directory alone.
std::optional<SlurmTask> slurmTaskOfThisProcess();

// The Slurm job this process runs in ("4242"), for run.json; "" outside Slurm.
std::string slurmJobOfThisProcess();

// Joins `dir` as `task`, writing its run file `doc`: refused in one line when the directory holds
// another run (run.json, stores without task run files), another job's tasks, or this task already.
Status joinRunDir(const std::string& dir, const SlurmTask& task, const nlohmann::json& doc);

// How a task ends, once its training ended and it waited for the other tasks recording into `dir`
// (up to `most`, saying once that it waits). Every task concludes from the whole directory, so all
// exit alike; only the lowest task there prints the report, the others its first line, so that a
// job's log holds it once.
struct TaskEnding {
  bool prints_report = true;
  std::string preface;  // lines said before the report: tasks still running, tasks recorded elsewhere
};
TaskEnding endTask(const std::string& dir, const SlurmTask& task, std::chrono::milliseconds most);

}  // namespace nanprov::cli
