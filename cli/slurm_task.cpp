#include "cli/slurm_task.h"

#include <cstdlib>
#include <iostream>
#include <thread>

#include "base/env.h"
#include "base/text.h"
#include "store/run_dir.h"
#include "store/run_file.h"
#include "store/task_run_files.h"

namespace nanprov::cli {
namespace {

// Slurm's own steps (batch 0xfffffffe, extern 0xffffffff, interactive, pending) sit at the top of
// the id range; a step srun starts counts from 0.
constexpr int64_t kFirstSpecialStep = 0xfffffff0;

std::string joinedTasks(const std::vector<int>& tasks) {
  std::vector<std::string> words;
  for (int t : tasks) words.push_back(std::to_string(t));
  return joined(words);
}

}  // namespace

nlohmann::json SlurmTask::json() const { return {{"job", job}, {"task", task}, {"tasks", tasks}, {"node", node}}; }

std::optional<SlurmTask> slurmTaskOfThisProcess() {
  const std::string job = slurmJobOfThisProcess();
  const int64_t step = envInteger("SLURM_STEP_ID", -1, 0), task = envInteger("SLURM_PROCID", -1, 0);
  if (job.empty() || step < 0 || step >= kFirstSpecialStep || task < 0) return std::nullopt;
  return SlurmTask{.job = job + "." + std::to_string(step),
                   .task = static_cast<int>(task),
                   .tasks = static_cast<int>(envInteger("SLURM_NTASKS", task + 1, task + 1)),
                   .node = static_cast<int>(envInteger("SLURM_NODEID", 0, 0))};
}

std::string slurmJobOfThisProcess() {
  const char* job = std::getenv("SLURM_JOB_ID");
  return job ? job : "";
}

Status joinRunDir(const std::string& dir, const SlurmTask& task, const nlohmann::json& doc) {
  const std::string taken = dir + " already holds a run; pick a new --out (or remove the directory)";
  if (store::holdsRunFile(dir) && store::taskRunFilePaths(dir).empty()) return Status::Error(taken);
  const store::TaskStates siblings = store::taskStates(dir);
  for (const auto& [other, job] : siblings.job) {
    if (job.empty())
      return Status::Error(dir + "/" + store::taskRunFileName(other) +
                           " is damaged; pick a new --out (or remove the directory)");
    if (job != task.job) {
      return Status::Error(dir + " holds Slurm job " + job + "'s run, not job " + task.job +
                           "'s; give each job its own --out (e.g. --out runs/$SLURM_JOB_ID)");
    }
  }
  // Stores with no task's run file beside them are an older run's: the tasks would add to its ranks.
  if (siblings.job.empty() &&
      (store::holdsRankStores(dir) || !store::callTallyPaths(dir).empty() || !store::workerCallPaths(dir).empty())) {
    return Status::Error(taken);
  }
  NANPROV_ASSIGN_OR_RETURN(auto claimed, store::claimTaskRunFile(dir, task.task, doc));
  if (!claimed) {
    return Status::Error("task " + std::to_string(task.task) + " of Slurm job " + task.job + " already recorded into " +
                         dir + "; pick a new --out for a rerun");
  }
  return Status::Ok();
}

namespace {

std::vector<int> waitForOtherTasks(const std::string& dir, const SlurmTask& task, std::chrono::milliseconds most) {
  const auto until = std::chrono::steady_clock::now() + most;
  bool said = false;
  for (;;) {
    std::vector<int> running = store::taskStates(dir).running;
    std::erase(running, task.task);
    if (running.empty() || std::chrono::steady_clock::now() >= until) return running;
    if (!said) {
      std::cerr << "nanprov: task " << task.task << " waits for task(s) " << joinedTasks(running) << " of Slurm job "
                << task.job << " recording into " << printable(dir) << " to end (at most "
                << std::chrono::duration_cast<std::chrono::seconds>(most).count() << " s)\n";
      said = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

}  // namespace

TaskEnding endTask(const std::string& dir, const SlurmTask& task, std::chrono::milliseconds most) {
  TaskEnding end;
  const std::vector<int> running = waitForOtherTasks(dir, task, most);
  std::vector<int> here;
  for (const auto& [t, job] : store::taskStates(dir).job) here.push_back(t);
  const std::string shown = printable(dir);
  if (!running.empty()) {
    end.preface += "nanprov: task(s) " + joinedTasks(running) + " of Slurm job " + task.job +
                   " still running: the report " + "below is what they recorded so far; nanprov report " + shown +
                   " once the job ended\n";
  }
  if (static_cast<int>(here.size()) < task.tasks) {
    end.preface += "nanprov: " + shown + " holds task(s) " + joinedTasks(here) + " of the " +
                   std::to_string(task.tasks) + " tasks of Slurm job " + task.job +
                   "; the others recorded into their nodes' directories: " +
                   "nanprov report DIR1 DIR2 ... reads them as one job\n";
  }
  if (!here.empty() && here.front() != task.task) {
    end.prints_report = false;
    end.preface += "nanprov: task " + std::to_string(task.task) + " of Slurm job " + task.job + " ended; task " +
                   std::to_string(here.front()) + " prints the report of " + shown + "\n";
  }
  return end;
}

}  // namespace nanprov::cli
