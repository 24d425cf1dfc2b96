// Builds the report's model (report/report.h) from a loaded run: everything any rendering of it
// shows is worked out here, once, and the renderings read nothing else. Used by `nanprov report`,
// `nanprov runs` and at the end of `nanprov run`.
#pragma once

#include "base/status.h"
#include "report/edges.h"
#include "report/report.h"

namespace nanprov::store {
struct RunData;
}  // namespace nanprov::store

namespace nanprov::report {

struct ReportOptions {
  // Also what only the HTML page shows: the layer × step picture, which streams every call of
  // every rank store (a loaded run holds only its edges), the edge's kept replay and the versions.
  bool page = false;
};

// Fails only where the page's reading fails (a damaged store the picture cannot draw).
StatusOr<Report> buildReport(const store::RunData& run, const ReportOptions& options = {});
StatusOr<Report> buildReport(const store::RunData& run, Findings findings,
                             const ReportOptions& options = {});  // edges already analyzed

}  // namespace nanprov::report
