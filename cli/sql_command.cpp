// `nanprov sql [RUN] "SELECT ..."`: read-only SQL over all rank stores of a run.
#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>

#include "base/json_text.h"
#include "base/text.h"
#include "cli/commands.h"
#include "store/reader.h"
#include "store/run_dir.h"

namespace nanprov::cli {

void addSqlCommand(CLI::App& app, int* exit_code) {
  struct Options {
    std::string first;
    std::vector<std::string> rest;  // more run directories of one job, then the query
    bool json = false;
    double timeout = 60;
    int64_t max_memory = int64_t{2} << 30;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("sql",
                                     "Read-only SQL over a run (tables: calls, tensors, kernels, captures, steps, "
                                     "sentinel, meta, step_summaries, trends, trend_warnings, replica_digests)");
  cmd->footer(
      "Examples:\n"
      "  nanprov sql \"SELECT rank, layer, call, phase FROM calls WHERE injected IS NOT NULL\"\n"
      "  nanprov sql runs/a \"SELECT role, SUM(nan) FROM tensors GROUP BY role\" --json\n"
      "  nanprov sql node0/run node1/run \"SELECT rank, COUNT(*) FROM calls GROUP BY rank\"   one job, two nodes\n\n"
      "The schema is documented in store/README.md. Statements that write are refused.");
  // Two positionals, not one taking 1-2 values: CLI11 then prints a usage line people can read.
  cmd->add_option("RUN_OR_QUERY", opts->first, "The run directory, or the query when the run is the newest")
      ->required();
  CLI::Option* second = cmd->add_option("QUERY", opts->rest,
                                        "One SELECT over the run given first (several directories of one multi-node "
                                        "job may come before it)")
                            ->expected(0, -1);
  cmd->add_flag("--json", opts->json, "Print rows as JSON objects");
  cmd->add_option("--timeout", opts->timeout, "Interrupt the query after this many seconds (default 60; 0: never)")
      ->check(CLI::Range(0.0, 1e6));
  cmd->add_option("--max-memory", opts->max_memory,
                  "Memory the query may use for SQLite's work and the rows it prints (default 2G; suffixes K M G)")
      ->transform(sizeValue())
      ->check(CLI::Range(int64_t{1} << 20, int64_t{1} << 40));
  cmd->callback([opts, exit_code, second] {
    bool run_given = second->count() > 0;  // `sql RUN ''` is an empty query, not a missing one
    std::string query = run_given ? opts->rest.back() : opts->first;
    if (query.find_first_not_of(" \t\r\n") == std::string::npos) {
      std::cerr << "nanprov sql: empty query: give one SELECT statement (see nanprov sql --help)\n";
      return void(*exit_code = kUsageError);
    }
    std::vector<std::string> given;
    if (run_given) {
      given.push_back(opts->first);
      given.insert(given.end(), opts->rest.begin(), opts->rest.end() - 1);
    }
    auto dir = resolveRunDirs("sql", given, exit_code);
    if (!dir) return;
    auto result =
        store::queryRun(*dir, query, {.timeout_seconds = opts->timeout, .max_memory_bytes = opts->max_memory});
    if (!result.ok()) return void(*exit_code = fail("sql", result.status()));
    if (opts->json) {
      nlohmann::json rows = nlohmann::json::array();
      for (const auto& row : result->rows) {
        nlohmann::json obj;
        for (size_t c = 0; c < row.size(); ++c) {
          if (!row[c]) obj[result->columns[c]] = nullptr;
          else if (result->numeric[c]) obj[result->columns[c]] = nlohmann::json::parse(*row[c], nullptr, false);
          else obj[result->columns[c]] = *row[c];
        }
        rows.push_back(obj);
      }
      std::cout << jsonText(rows, 2) << "\n";
    } else {
      for (std::string& name : result->columns) name = printable(name);
      for (auto& row : result->rows) {
        for (auto& cell : row) {
          if (cell) cell = printable(*cell);
        }
      }
      std::vector<size_t> width(result->columns.size());
      for (size_t c = 0; c < width.size(); ++c) width[c] = result->columns[c].size();
      for (const auto& row : result->rows) {
        for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c] ? row[c]->size() : 4);
      }
      auto line = [&](auto cell) {
        for (size_t c = 0; c < width.size(); ++c) {
          std::string v = cell(c);
          std::cout << v << std::string(width[c] - v.size() + (c + 1 < width.size() ? 2 : 0), ' ');
        }
        std::cout << "\n";
      };
      line([&](size_t c) { return result->columns[c]; });
      for (const auto& row : result->rows) line([&](size_t c) { return row[c] ? *row[c] : std::string("NULL"); });
    }
    *exit_code = kClean;
  });
}

}  // namespace nanprov::cli
