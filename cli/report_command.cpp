// `nanprov report [RUN] [--json] [--html FILE]`: the first non-finite edge of a run. Exit 0 clean,
// 1 edge found.
#include <iostream>

#include "base/json_text.h"
#include "cli/commands.h"
#include "report/build_report.h"
#include "report/report_html.h"
#include "report/report_json.h"
#include "report/report_text.h"
#include "store/file_replace.h"

namespace nanprov::cli {

int reportExitCode(const report::Conclusion& c, bool warn_only) {
  switch (c.outcome) {
    case report::Outcome::kClean:
    case report::Outcome::kPartial: return kClean;
    // Values went non-finite beside unchecked attention: a fault found, its origin not checked.
    case report::Outcome::kUnattributed: return kEdgeFound;
    case report::Outcome::kNothingChecked: return kNothingChecked;
    case report::Outcome::kAuditFinding: return warn_only || c.audit.warn_only ? kClean : kAuditFound;
    case report::Outcome::kReplicaDivergence: return kReplicaDiverged;
    case report::Outcome::kEdgeFound:
    case report::Outcome::kOutsideAttention: break;
  }
  return kEdgeFound;
}

void addReportCommand(CLI::App& app, int* exit_code) {
  struct Options {
    std::vector<std::string> run;
    bool json = false;
    std::string html;
    bool audit_warn_only = false;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("report", "First non-finite edge of a run, what followed, and where it came from");
  cmd->footer(
      "Examples:\n"
      "  nanprov report                          newest run under ./nanprov-runs\n"
      "  nanprov report nanprov-runs/20261130T151500.000Z --json | jq .first_edge\n"
      "  nanprov report node0/nanprov-runs/job42 node1/nanprov-runs/job42   one job, a directory per node\n\n"
      "The first line names the first non-finite edge (rank:layer:call), or the parameters whose\n"
      "gradients went non-finite first when that happened before any attention edge (the gradient\n"
      "sentinel), or says clean, or says nothing was checked and why. Every report counts the\n"
      "attention it recognised but could not check (coverage). In a call's name, call counts the\n"
      "calls of its layer (forward and backward alike): rank0:layer0:call6 and rank0:layer1:call6\n"
      "are the same step's calls of two layers.\n\n"
      "Exit status (nanprov run gives the same 1 and 5 when the training itself exited 0,\n"
      "unless --warn-only): 0 no fault found (JSON outcome \"clean\": attention checked, all finite, gradients\n"
      "finite; \"partial\": no fault in what was checked, but some attention was recognised and not\n"
      "checked, or ranks were not read), 1 a non-finite edge or non-finite gradients were found (JSON\n"
      "outcome \"edge\", \"outside_attention\", or \"unattributed\": values went non-finite and what made\n"
      "them was not checked), 2 usage error, 3 unreadable run, 4 nothing was checked,\n"
      "5 the audit (nanprov run --audit) found outputs that were finite but wrong, and no edge\n"
      "(JSON outcome \"audit_finding\"; 0 instead when the run or this report says --audit-warn-only).\n"
      "Audit findings are listed under audit_findings in the JSON, beside the edges. 6: the run\n"
      "directories given are not one job's (one line says what differs). 7: ranks that replicate\n"
      "their parameters (DDP) held different values after a step while every value stayed finite\n"
      "(JSON outcome \"replica_divergence\"; replicas.first_divergence names the step, the rank and\n"
      "the first parameter that differs): suspect that rank's device.\n\n"
      "Several run directories (one per node of a multi-node job, each written by that node's\n"
      "nanprov run) are read as one run: calls ordered by step first, then time (clocks differ\n"
      "between hosts). Ranks of the job with no store read are listed as missing_ranks.\n\n"
      "With --html FILE it also writes the report as one self-contained page, to open offline or\n"
      "attach to a bug report (it fetches nothing): the verdict and the first edge, the gradient\n"
      "sentinel, coverage and audit findings; a layer x step picture per rank, forward and backward,\n"
      "each cell coloured by the worst health of its calls (hover a cell for them); the edge's\n"
      "kernels; the replay verdicts of every backend when the capture's replay is kept next to it\n"
      "(nanprov replay RUN/captures/X.safetensors --keep writes RUN/captures/X.replay.json; the page\n"
      "gives the exact line); and the run's command, ranks and versions. The text report (or the JSON with\n"
      "--json) still goes to stdout, and the exit status is the same; when the page cannot be\n"
      "written, one line says why and the exit status is 3.\n"
      "  nanprov report --html report.html");
  addRunArgument(cmd, &opts->run);
  addJsonFlag(cmd, &opts->json);
  cmd->add_option("--html", opts->html, "Also write the report as one self-contained HTML page to FILE")
      ->type_name("FILE");
  cmd->add_flag("--audit-warn-only", opts->audit_warn_only, "Audit findings are reported, but exit 0");
  cmd->callback([opts, exit_code] {
    auto run = openRun("report", opts->run, exit_code, store::RunScope::kEdges);
    if (!run) return;
    // The page's picture streams every call of the run: read only when the page is asked for.
    auto report = report::buildReport(*run, {.page = !opts->html.empty()});
    if (!report.ok()) return void(*exit_code = fail("report", report.status()));
    // The page first: when it cannot be written, the one line saying so is the whole answer.
    if (!opts->html.empty()) {
      // Through a temporary file and a rename: a browser open on it never sees half a page.
      const std::string page = report::reportHtml(*report);
      Status wrote = store::replaceFile(opts->html, "HTML report", [&](std::ostream& out) { out << page; });
      if (!wrote.ok()) return void(*exit_code = fail("report", wrote));
    }
    if (opts->json) std::cout << jsonText(report::reportJson(*report), 2) << "\n";
    else std::cout << report::reportText(*report);
    *exit_code = reportExitCode(report->conclusion, opts->audit_warn_only);
  });
}

}  // namespace nanprov::cli
