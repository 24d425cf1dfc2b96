// `report --html`: the report as one self-contained page, to read offline and attach to a bug
// report. Inline CSS only, no script and nothing fetched: its Content-Security-Policy forbids
// both, so even a text that slipped past the escaping could neither run nor call out. Rendered
// from the same Report as the text and the JSON, plus what only the run's files hold: the
// layer × step picture, the edge's replay verdicts, the versions (cli/page_sources.h).
#pragma once

#include <string>

#include "base/status.h"
#include "report/page_sources.h"
#include "report/report.h"

namespace nanprov {

// The page. Every text from the store, the captures or the command line is escaped: a module
// name is any ModuleDict key, and must stay text.
std::string reportHtml(const Report& report, const PageSources& sources);

// Reads the sources, renders and writes the page to `path` (through a temporary file and a
// rename, so a browser open on it never sees half a page).
Status writeReportHtml(const Report& report, const std::string& path);

}  // namespace nanprov
