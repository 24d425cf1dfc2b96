// The run files of a Slurm job's tasks. `srun nanprov run --out DIR -- python train.py` starts one
// `nanprov run` per task, all into DIR (a shared directory, or each node's local one). One run.json
// would be clobbered by every task's start and end, so each task's `nanprov run` writes a file of
// its own, run.task-<t>.json (t = SLURM_PROCID), and readers merge them (readRunFile).
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"
#include "store/run_file.h"

namespace nanprov::store {

std::string taskRunFileName(int task);  // "run.task-<t>.json"

// The task run files in `dir` (regular files named for a task): task → path.
std::map<int, std::string> taskRunFilePaths(const std::string& dir);

// Creates task `task`'s run file exclusively and whole (written aside, then linked into place),
// so a task joining the directory reads its siblings' files complete. false: the task has one.
StatusOr<bool> claimTaskRunFile(const std::string& dir, int task, const nlohmann::json& doc);

// Rewrites the task's run file (its exit, at the end) whole: siblings may be reading it.
Status writeTaskRunFile(const std::string& dir, int task, const nlohmann::json& doc);

// One run file's fields, from its JSON (run.json's or a task's); not readable when it is no object.
RunFile runFileFrom(const nlohmann::json& doc);

// Whether `dir` holds a run file: run.json, or a Slurm task's.
bool holdsRunFile(const std::string& dir);

// The Slurm tasks recording into `dir`, from their run files.
struct TaskStates {
  std::map<int, std::string> job;  // task → its Slurm job and step ("4242.0"); "" in a damaged file
  std::vector<int> running;        // tasks whose training has not ended
};
TaskStates taskStates(const std::string& dir);

// The task run files of `dir` read as one run file: the settings of the lowest task, the earliest
// start, and an exit once every task ended (a signal first, else the highest exit code, as srun
// reports a step). Not readable when `dir` holds none.
RunFile mergedTaskRunFiles(const std::string& dir);

}  // namespace nanprov::store
