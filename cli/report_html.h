// `report --html`: the report as one self-contained page, to read offline and attach to a bug
// report. Inline CSS only, no script and nothing fetched: its Content-Security-Policy forbids
// both, so even a text that slipped past the escaping could neither run nor call out. Rendered
// from the same Report as the text and the JSON, plus what only the run's files hold: the
// layer × step picture, the edge's replay verdicts, the capture's versions.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "base/status.h"
#include "cli/health_picture.h"
#include "cli/report.h"

namespace nanprov {

// What the page shows beyond the report, read from the run's files.
struct PageSources {
  HealthPicture picture;
  std::string capture;                         // the edge's capture file; empty: none was written
  std::optional<nlohmann::json> replay;        // its replay's JSON, when kept next to it (CAPTURE.replay.json)
  std::string replay_problem;                  // why a kept replay could not be read
  std::map<std::string, std::string> captured_environment;  // cuda_runtime, cudnn, gpu: a rank's meta, else a capture's
};
StatusOr<PageSources> readPageSources(const Report& report);

// The page. Every text from the store, the captures or the command line is escaped: a module
// name is any ModuleDict key, and must stay text.
std::string reportHtml(const Report& report, const PageSources& sources);

// Reads the sources, renders and writes the page to `path` (through a temporary file and a
// rename, so a browser open on it never sees half a page).
Status writeReportHtml(const Report& report, const std::string& path);

}  // namespace nanprov
