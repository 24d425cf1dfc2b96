// `nanprov trace [RUN] --out FILE`: the run as a timeline for ui.perfetto.dev and chrome://tracing.
#include <iostream>

#include "base/json_text.h"
#include "base/text.h"
#include "cli/commands.h"
#include "cli/perfetto_trace.h"
#include "store/file_replace.h"

namespace nanprov::cli {
namespace {

struct Options {
  std::vector<std::string> run;
  std::string out;
};

}  // namespace

void addTraceCommand(CLI::App& app, int* exit_code) {
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("trace", "Write the run as a timeline that ui.perfetto.dev and chrome://tracing open");
  cmd->footer(
      "The file is Chrome trace-event JSON. Open it at https://ui.perfetto.dev (\"Open trace\n"
      "file\", or drag it onto the page; it stays in the browser) or in chrome://tracing (Load).\n\n"
      "What it shows: a process per rank; in it a \"training thread\" track with the optimizer\n"
      "steps and, inside them, the forward attention calls; an \"autograd\" track with the\n"
      "backward calls; and, where CUPTI traced them, a \"CUDA stream N\" track per stream with\n"
      "the kernels, each joined to its call by an arrow. Each call is named rank:layer:call as in\n"
      "the report; click it for its module, phase, health and non-finite roles. The first\n"
      "non-finite edge is a marker across its rank (\"first non-finite edge: ...\"). Times are\n"
      "µs from the run's first event; slices whose stored times overlap are fitted to nest,\n"
      "and keep the stored times in their args.\n\n"
      "Every call of the run goes in: a long run makes a large file.\n\n"
      "Examples:\n"
      "  nanprov trace --out nan.json                 the newest run\n"
      "  nanprov trace runs/nan-hunt --out nan.json");
  addRunArgument(cmd, &opts->run);
  cmd->add_option("--out", opts->out, "The file to write (JSON)")->required()->type_name("FILE");
  cmd->callback([opts, exit_code] {
    auto run = openRun("trace", opts->run, exit_code, RunScope::kAll);
    if (!run) return;
    if (Status times = checkTraceTimes(*run); !times.ok()) return void(*exit_code = fail("trace", times));
    const Findings findings = analyze(*run);
    const nlohmann::json trace = perfettoTrace(*run, findings);
    // Written aside and renamed: a viewer never opens half a trace.
    Status wrote = replaceFile(opts->out, "trace", [&](std::ostream& out) { out << jsonText(trace) << "\n"; });
    if (!wrote.ok()) return void(*exit_code = fail("trace", wrote));
    std::cout << "wrote " << printable(opts->out) << ": " << run->ranks.size()
              << (run->ranks.size() == 1 ? " rank, " : " ranks, ") << run->calls.size() << " attention calls";
    if (findings.first) std::cout << ", first non-finite edge " << callName(run->calls[*findings.first]);
    std::cout << "\nopen it at https://ui.perfetto.dev (Open trace file) or in chrome://tracing\n";
    *exit_code = kClean;
  });
}

}  // namespace nanprov::cli
