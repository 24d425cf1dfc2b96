#include "store/process_notes.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/records/call_name.h"
#include "store/small_file.h"

namespace nanprov::store {

ProcessNotes readProcessNotes(const RunDirs& dirs) {
  namespace fs = std::filesystem;
  ProcessNotes notes;
  for (const std::string& run_dir : dirs.all) {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(fs::path(run_dir) / "processes", ec)) {
      nlohmann::json note = readJsonFile(entry.path().string());
      if (note.is_discarded() || !note.is_object()) continue;
      const std::string status = note.value("status", "");
      if (status == "launcher") continue;
      ++notes.processes;
      if (status == "instrumented") {
        ++notes.instrumented;
        const nlohmann::json rank = note.value("rank", nlohmann::json());
        notes.ranks.insert(rank.is_number_integer() && rank.get<int64_t>() >= 0 && rank.get<int64_t>() <= kMaxRank
                               ? static_cast<int>(rank.get<int64_t>())
                               : 0);
      } else {
        notes.problems.push_back("pid " + std::to_string(note.value("pid", 0)) + ": " +
                                 note.value("detail", std::string()));
      }
    }
  }
  return notes;
}

}  // namespace nanprov::store
