// `nanprov report [RUN] [--json]`: the first non-finite edge of a run. Exit 0 clean, 1 edge found.
#include <iostream>

#include "cli/commands.h"
#include "cli/report.h"

namespace nanprov::cli {

void addReportCommand(CLI::App& app, int* exit_code) {
  struct Options {
    std::string run;
    bool json = false;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("report", "First non-finite edge of a run, what followed, and where it came from");
  cmd->footer(
      "Examples:\n"
      "  nanprov report                          newest run under ./nanprov-runs\n"
      "  nanprov report nanprov-runs/20261130T151500.000Z --json | jq .first_edge\n\n"
      "Exit status: 0 clean, 1 a non-finite edge was found, 2 usage error, 3 unreadable run.");
  cmd->add_option("run", opts->run, "Run directory (default: the newest under ./nanprov-runs)");
  cmd->add_flag("--json", opts->json, "Print JSON for scripts");
  cmd->callback([opts, exit_code] {
    auto run = openRun("report", opts->run, exit_code);
    if (!run) return;
    Findings findings = analyze(run->calls);
    if (opts->json) std::cout << reportJson(*run, findings).dump(2) << "\n";
    else std::cout << reportText(*run, findings);
    *exit_code = findings.first ? kEdgeFound : kClean;
  });
}

}  // namespace nanprov::cli
