// `report --html`: the report as one self-contained page, to read offline and attach to a bug
// report. Inline CSS only, no script and nothing fetched: its Content-Security-Policy forbids
// both, so even a text that slipped past the escaping could neither run nor call out. Rendered
// from the same model as the text and the JSON (report/report.h), built with ReportOptions::page
// so that it holds what only the page shows: the layer × step picture, the edge's replay
// verdicts, the versions (report/page_sources.h). It reads nothing else.
#pragma once

#include <string>

#include "report/report.h"

namespace nanprov::report {

// The page. Every text from the store, the captures or the command line is escaped: a module
// name is any ModuleDict key, and must stay text. A report built without the page's sources
// draws no picture and shows no replay.
std::string reportHtml(const Report& report);

}  // namespace nanprov::report
