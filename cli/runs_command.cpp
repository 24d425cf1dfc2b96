// `nanprov runs [--root DIR] [--json]`: the runs under a root, newest first, each with what it
// ran, how many ranks and calls it recorded, and what its report concludes.
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "base/json_text.h"
#include "base/text.h"
#include "cli/commands.h"
#include "report/build_report.h"
#include "report/outcome.h"
#include "store/job.h"
#include "store/run_dir.h"

namespace nanprov::cli {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

// One run's line: read from run.json and its stores; a damaged run says so instead of failing.
json describeRun(const fs::path& dir) {
  json row = {{"run", dir.string()}, {"command", ""}, {"exit_code", nullptr}, {"job", nullptr}};
  const store::RunFile settings = store::readRunFile(dir.string());
  if (settings.readable) {
    std::string command;
    for (const std::string& word : settings.command) command += (command.empty() ? "" : " ") + word;
    row["command"] = command;
    if (settings.exit_code) row["exit_code"] = *settings.exit_code;
  }
  auto stores = store::rankStorePaths(dir.string());
  row["ranks"] = stores.ok() ? stores->size() : 0;
  auto run = store::loadRun(dir.string(), store::RunScope::kEdges);
  if (!run.ok()) {
    row["calls"] = nullptr;
    row["outcome"] = "unreadable";
    row["why"] = run.status().message();
    return row;
  }
  row["calls"] = run->total_calls;
  // The job's id: the directories of one multi-node job share it (nanprov report DIR...).
  if (std::string job = store::jobIdOf(*run); !job.empty()) row["job"] = job;
  auto report = report::buildReport(*run);  // without the page: nothing more is read, so nothing fails
  row["outcome"] = report.ok() ? report::outcomeName(report->conclusion.outcome) : "unreadable";
  return row;
}

// Escaped (base/text.h), then cut on a character's first byte.
std::string shortened(const std::string& text, size_t width) {
  std::string shown = printable(text);
  if (shown.size() <= width) return shown;
  size_t cut = width - 3;
  while (cut > 0 && (static_cast<unsigned char>(shown[cut]) & 0xc0) == 0x80) --cut;
  return shown.substr(0, cut) + "...";
}

// A column of `width`: shortened, then padded.
std::string fitted(const std::string& text, size_t width) {
  std::string s = shortened(text, width);
  return s + std::string(width - s.size(), ' ');
}

}  // namespace

void addRunsCommand(CLI::App& app, int* exit_code) {
  struct Options {
    std::string root = store::kDefaultRunsRoot;
    bool json = false;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("runs", "List the runs under ./nanprov-runs, newest first, with their outcome");
  cmd->footer(
      "Examples:\n"
      "  nanprov runs\n"
      "  nanprov runs --root /scratch/nan-hunt --json | jq '.[] | select(.outcome == \"edge\")'\n\n"
      "job (JSON) is the job's id (slurm:<job>.<step> under srun, else torchrun's --rdzv-id): the run directories of "
      "one\n"
      "multi-node job share it, and nanprov report DIR1 DIR2 reads them as one run.\n"
      "outcome is what `nanprov report` concludes (clean; partial: nothing went non-finite, but not\n"
      "everything was checked; unattributed: values went non-finite and what made them was not checked;\n"
      "edge, outside_attention, nothing_checked, audit_finding, replica_divergence), or unreadable. Commands without a "
      "run\n"
      "default to the newest run that recorded data.");
  cmd->add_option("--root", opts->root, "Folder holding run directories (default: ./nanprov-runs)");
  addJsonFlag(cmd, &opts->json);
  cmd->callback([opts, exit_code] {
    if (opts->root.empty()) {
      std::cerr << "nanprov runs: --root '' names no folder; leave it out for ./" << store::kDefaultRunsRoot << "\n";
      return void(*exit_code = kUsageError);
    }
    auto dirs = store::runsNewestFirst(opts->root);
    if (!dirs.ok()) return void(*exit_code = fail("runs", dirs.status()));
    json rows = json::array();
    for (const std::string& dir : *dirs) rows.push_back(describeRun(dir));
    if (opts->json) {
      std::cout << jsonText(rows, 2) << "\n";
    } else if (rows.empty()) {
      std::cout << "no runs under " << printable(opts->root) << "; start one with `nanprov run -- python train.py`\n";
    } else {
      std::cout << fitted("run", 40) << "  ranks  calls     " << fitted("outcome", 17) << "  command\n";
      for (const json& r : rows) {
        std::string calls = r["calls"].is_null() ? "-" : std::to_string(r["calls"].get<int64_t>());
        std::cout << fitted(r["run"], 40) << "  " << fitted(std::to_string(r["ranks"].get<int64_t>()), 5) << "  "
                  << fitted(calls, 8) << "  " << fitted(r["outcome"], 17) << "  " << shortened(r["command"], 60)
                  << "\n";
      }
    }
    *exit_code = kClean;
  });
}

}  // namespace nanprov::cli
