#include "store/task_run_files.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "base/json_text.h"
#include "base/numbers.h"
#include "base/records/call_name.h"
#include "store/file_replace.h"
#include "store/small_file.h"

namespace nanprov::store {
namespace fs = std::filesystem;
namespace {

constexpr std::string_view kPrefix = "run.task-", kSuffix = ".json";

std::string pathOf(const std::string& dir, int task) { return (fs::path(dir) / taskRunFileName(task)).string(); }

// The task a file name claims, spelt as nanprov spells it ("run.task-01.json" is no task's).
std::optional<int> taskOfName(const std::string& name) {
  if (name.size() <= kPrefix.size() + kSuffix.size() || !name.starts_with(kPrefix) || !name.ends_with(kSuffix))
    return std::nullopt;
  std::string digits = name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
  auto task = parseInteger(digits, 0, kMaxRank);
  if (!task || std::to_string(*task) != digits) return std::nullopt;
  return static_cast<int>(*task);
}

}  // namespace

std::string taskRunFileName(int task) { return std::string(kPrefix) + std::to_string(task) + std::string(kSuffix); }

std::map<int, std::string> taskRunFilePaths(const std::string& dir) {
  std::map<int, std::string> paths;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::error_code type_ec;
    auto task = taskOfName(entry.path().filename().string());
    if (task && entry.is_regular_file(type_ec)) paths[*task] = entry.path().string();
  }
  return paths;
}

StatusOr<bool> claimTaskRunFile(const std::string& dir, int task, const nlohmann::json& doc) {
  const std::string path = pathOf(dir, task);
  const std::string aside = path + ".claim." + std::to_string(getpid());
  if (Status st = replaceFile(aside, "run file", [&](std::ostream& out) { out << jsonText(doc, 2) << "\n"; }); !st.ok())
    return st;
  // link() fails with EEXIST atomically where rename() would replace: exactly one claim wins.
  const int linked = ::link(aside.c_str(), path.c_str());
  const int err = errno;
  std::error_code ignored;
  fs::remove(aside, ignored);
  if (linked == 0) return true;
  if (err == EEXIST) return false;
  return Status::Error("cannot write " + path + ": " + std::strerror(err));
}

Status writeTaskRunFile(const std::string& dir, int task, const nlohmann::json& doc) {
  return replaceFile(pathOf(dir, task), "run file", [&](std::ostream& out) { out << jsonText(doc, 2) << "\n"; });
}

TaskStates taskStates(const std::string& dir) {
  TaskStates states;
  for (const auto& [task, path] : taskRunFilePaths(dir)) {
    const nlohmann::json doc = readJsonFile(path);
    const nlohmann::json* slurm = doc.is_object() && doc.contains("slurm") ? &doc["slurm"] : nullptr;
    states.job[task] = slurm && slurm->is_object() && slurm->contains("job") && (*slurm)["job"].is_string()
                           ? (*slurm)["job"].get<std::string>()
                           : "";
    if (!runFileFrom(doc).ended()) states.running.push_back(task);
  }
  return states;
}

RunFile mergedTaskRunFiles(const std::string& dir) {
  RunFile merged;
  int highest_exit = 0;
  std::optional<std::string> first_signal;
  bool running = false;
  for (const auto& [task, path] : taskRunFilePaths(dir)) {
    const nlohmann::json doc = readJsonFile(path);
    RunFile f = runFileFrom(doc);
    if (!f.readable) continue;
    if (!merged.readable) {
      merged = f;  // the lowest task's settings: every task was started with the same command line
      merged.exit_code.reset();
      merged.signal.reset();
    }
    if (f.started_ns && (!merged.started_ns || *f.started_ns < *merged.started_ns)) merged.started_ns = f.started_ns;
    if (!f.ended()) running = true;
    if (f.signal && !first_signal) first_signal = f.signal;
    if (f.exit_code) highest_exit = std::max(highest_exit, *f.exit_code);
  }
  // Ended only once every task did: a task still training may yet find or fail.
  if (merged.readable && !running) {
    if (first_signal) merged.signal = first_signal;
    else merged.exit_code = highest_exit;
  }
  return merged;
}

}  // namespace nanprov::store
