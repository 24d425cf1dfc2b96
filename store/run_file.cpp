#include "store/run_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "base/json_text.h"
#include "store/file_replace.h"
#include "store/small_file.h"
#include "store/task_run_files.h"

namespace nanprov::store {
namespace {

std::string pathIn(const std::string& dir) { return (std::filesystem::path(dir) / kRunFileName).string(); }

}  // namespace

RunFile readRunFile(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::exists(pathIn(dir), ec) && !taskRunFilePaths(dir).empty()) return mergedTaskRunFiles(dir);
  return runFileFrom(readJsonFile(pathIn(dir)));
}

bool holdsRunFile(const std::string& dir) {
  std::error_code ec;
  return std::filesystem::is_regular_file(pathIn(dir), ec) || !taskRunFilePaths(dir).empty();
}

RunFile runFileFrom(const nlohmann::json& doc) {
  RunFile f;
  if (doc.is_discarded() || !doc.is_object()) return f;
  f.readable = true;
  if (doc.contains("command") && doc["command"].is_array()) {
    for (const nlohmann::json& word : doc["command"])
      f.command.push_back(word.is_string() ? word.get<std::string>() : "?");
  }
  if (doc.contains("built_torch") && doc["built_torch"].is_string()) f.torch = doc["built_torch"].get<std::string>();
  if (doc.contains("exit_code") && doc["exit_code"].is_number_integer()) f.exit_code = doc["exit_code"].get<int>();
  if (doc.contains("signal") && doc["signal"].is_string()) f.signal = doc["signal"].get<std::string>();
  if (doc.contains("started_ns") && doc["started_ns"].is_number_integer())
    f.started_ns = doc["started_ns"].get<int64_t>();
  if (doc.contains("probe_modules") && doc["probe_modules"].is_array()) {
    for (const nlohmann::json& spec : doc["probe_modules"]) {
      if (spec.is_string()) f.probe_modules.push_back(spec.get<std::string>());
    }
  }
  if (doc.contains("audit") && doc["audit"].is_object()) {
    const nlohmann::json& a = doc["audit"];
    // value() throws on a field of the wrong type: such a file reads as no audit settings.
    try {
      f.audit.on = a.value("on", false);
      f.audit.warn_only = a.value("warn_only", false);
      f.audit.every_steps = a.value("every_steps", int64_t{0});
      f.audit.budget_percent = a.value("budget_percent", 0.0);
    } catch (const nlohmann::json::exception&) {
      f.audit = {};
    }
  }
  return f;
}

StatusOr<bool> claimRunFile(const std::string& dir) {
  const std::string path = pathIn(dir);
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0 && errno == EEXIST) return false;
  if (fd < 0) return Status::Error("cannot write " + path + ": " + std::strerror(errno));
  ::close(fd);
  return true;
}

Status writeRunFile(const std::string& dir, const nlohmann::json& doc) {
  // Written beside it, then renamed over it: on a full disk the run.json written before stays whole.
  return replaceFile(pathIn(dir), "", [&](std::ostream& out) { out << jsonText(doc, 2) << "\n"; });
}

}  // namespace nanprov::store
