// The report as text for people: `nanprov report` and the end of `nanprov run`. Renders the
// model (report/report.h) and reads nothing else; texts from the store are printed escaped
// (report/terminal_text.h).
#pragma once

#include <string>

#include "report/report.h"

namespace nanprov::report {

// The first line names the edge as rank<R>:layer<L>:call<C>, names the parameters whose
// gradients went non-finite first, says the run is clean, or that nothing was checked.
std::string reportText(const Report& report);

// "run DIR: 2 ranks, 48 attention calls checked, 4 optimizer steps", and a second line when the
// last calls of a process never reached the store. The directory is printed escaped.
std::string summaryLine(const RunOverview& run);
// What the store budget summarised, in one line ("" when nothing was): the counts stay, the
// per-call detail of those steps is gone.
std::string summarisedText(const Summarised& summarised);

// "64 query rows (over batch and heads) have every key masked", replay's unit; the mask's own rows,
// named so, where its shape does not say what it broadcasts to.
std::string maskedRowsText(const CallRecord& call, const TensorHealth& mask);

}  // namespace nanprov::report
