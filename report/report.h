// The report on a run, as one model: worked out once from the stores (report/build_report.h),
// then rendered as text (report_text.h), JSON (report_json.h) and the HTML page (report_html.h),
// which read nothing else. Texts are kept as stored: each rendering escapes them for where it
// writes (report/terminal_text.h for the terminal).
#pragma once

#include <optional>
#include <string>

#include "base/records/call_health.h"
#include "base/records/call_record.h"
#include "base/records/device_identity.h"
#include "report/call_issues.h"
#include "report/call_kernels.h"
#include "report/edges.h"
#include "report/first_module.h"
#include "report/layer_trends.h"
#include "report/outcome.h"
#include "report/page_sources.h"
#include "report/run_overview.h"

namespace nanprov::report {

// A call's capture, as `nanprov replay` takes it.
struct EdgeCapture {
  std::string path;     // the capture file (under its rank's run directory); "" when skipped
  std::string skipped;  // why it was not captured
};

// A call the report names (the first edge, the first source edge), with what it says of it.
struct EdgeCall {
  CallRecord call;
  CallHealth health;
  KernelsOfCall kernels;
  std::optional<EdgeCapture> capture;  // none: no capture was decided for it
  std::string mesh;                    // where a DeviceMesh placed its rank (dp, tp, pp...); "" when none
  DeviceIdentity device;               // the host and GPU it ran on (its rank's, for its device)
  double largest_finite_input = 0;     // the largest |x| among its finite inputs (masks aside)
};

// Where a source edge's large inputs came from, as far as attention saw: the attention forward
// call before it in the same step on the same rank, if any. None means the values came from the
// batch or the modules before the step's first attention.
struct InputTrail {
  double largest = 0;  // the edge's largest finite input
  std::optional<CallRecord> previous;
  double previous_largest = 0;
};

struct Report {
  RunOverview run;
  // The earliest call, across ranks by (step, time), that touched a non-finite value, and where
  // its values came from.
  std::optional<EdgeCall> first_edge;
  Origin origin = Origin::kNone;
  std::optional<InputTrail> input_trail;  // of a first edge attention made
  // The earliest source edge: the first edge, unless the values came from upstream.
  std::optional<EdgeCall> first_source_edge;
  Propagation propagation;
  Conclusion conclusion;                    // the sentinel, coverage, the audit, the outcome
  CallIssues source_issues;                 // the known issues the first source edge matches, or may match
  std::optional<FirstModule> first_module;  // --trail: the module that made the first non-finite value
  Trends trends;                            // each layer's trend and the warnings the run said
  std::optional<PageSources> page;          // what only the HTML page shows (ReportOptions::page)
};

}  // namespace nanprov::report
