// What `report --html` shows beyond the report, read from the run's files: the layer x step
// picture (streamed from the stores), the edge's kept replay, and the versions and GPU the run
// had. Reading is kept apart from rendering: the page is a function of these and the Report.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "base/status.h"
#include "report/health_picture.h"
#include "report/report.h"

namespace nanprov {

// What the page shows beyond the report, read from the run's files.
struct PageSources {
  HealthPicture picture;
  std::string capture;                         // the edge's capture file; empty: none was written
  std::optional<nlohmann::json> replay;        // its replay's JSON, when kept next to it (CAPTURE.replay.json)
  std::string replay_problem;                  // why a kept replay could not be read
  std::map<std::string, std::string> environment;  // cuda_runtime, cudnn, gpu: a rank's meta, else a capture's
};
StatusOr<PageSources> readPageSources(const Report& report);

}  // namespace nanprov
