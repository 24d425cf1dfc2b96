// The report on a run: the first non-finite edge, what followed, as text for people and JSON for
// scripts. Used by `nanprov report` and at the end of `nanprov run`.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "report/call_issues.h"
#include "report/edges.h"
#include "report/first_module.h"
#include "report/layer_trends.h"
#include "report/outcome.h"
#include "store/reader.h"

namespace nanprov {

// "run DIR: 2 ranks, 48 attention calls checked, 4 optimizer steps", and a second line when the
// last calls of a process never reached the store. The directory is printed escaped.
std::string summaryLine(const RunData& run);
// What the store budget summarised, in one line ("" when nothing was): the counts stay, the
// per-call detail of those steps is gone.
std::string summarisedText(const RunData& run);

// "64 query rows (over batch and heads) have every key masked", replay's unit; the mask's own rows,
// named so, where its shape does not say what it broadcasts to.
std::string maskedRowsText(const CallRecord& call, const TensorHealth& mask);

nlohmann::json callJson(const CallRecord& call, const CallHealth& health);

// The report on a loaded run, worked out once: its edges (analyze) and what they conclude
// (conclude: the sentinel, coverage, the audit). Text, JSON and the exit code only render it.
struct Report {
  const RunData* run = nullptr;  // the run it was built from, which must outlive it
  Findings findings;
  Conclusion conclusion;
  CallIssues source_issues;  // the known issues the first source edge matches, or may match
  std::optional<ModuleCheckRecord> first_module;  // --trail: the module that made the first non-finite value
  Trends trends;  // each layer's trend and the warnings the run said
};
Report buildReport(const RunData& run);
Report buildReport(const RunData& run, Findings findings);  // edges already analyzed

nlohmann::json reportJson(const Report& report);
// The first line names the edge as rank<R>:layer<L>:call<C>, names the parameters whose
// gradients went non-finite first, says the run is clean, or that nothing was checked. Texts from
// the store are printed escaped (cli/terminal_text.h).
std::string reportText(const Report& report);

}  // namespace nanprov
