// What `report --html` shows beyond the rest of the report, read from the run's files when the
// report is built with ReportOptions::page (report/build_report.h): the layer x step picture
// (streamed from the stores), the edge's kept replay, and the versions and GPU the run had.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "report/health_picture.h"
#include "report/judgements.h"

namespace nanprov::store {
struct RunData;
}  // namespace nanprov::store

namespace nanprov::report {

struct Report;

// One row of a kept replay's matrix: the run's own outputs, or a backend the replay ran.
struct ReplayedBackend {
  std::string name;       // the backend ("math", "cudnn", ...); "" for the run's own outputs
  bool captured = false;  // the run's own outputs, judged
  bool original = false;  // the backend the run used
  bool supported = true;  // false: it could not run the call here, and `detail` says why
  std::string detail;
  std::vector<TensorJudgement> tensors;
};

// A replay's verdicts kept next to the capture (CAPTURE.replay.json, what `nanprov replay --json`
// printed), as the page shows them.
struct KeptReplay {
  std::optional<std::string> replayed_on, captured_on, root_cause, explanation;
  std::vector<ReplayedBackend> rows;  // the run's own outputs first, when judged
  std::vector<KnownIssueNote> known_issues;
};

// The versions and GPU the run had (a rank's meta, else a capture's), in the words the page shows;
// nullopt: not recorded (no CUDA call was checked).
struct RunEnvironment {
  std::optional<std::string> cuda_runtime;  // "12.8" for CUDA's 12080; as recorded when not a number
  std::optional<std::string> cudnn;         // "9.19.0" for cuDNN's 91900; "" when not a number
  std::optional<std::string> gpu;           // "NVIDIA H200 (sm_90)"
};

struct PageSources {
  HealthPicture picture;
  std::string capture;               // the edge's capture file; empty: none was written
  std::string kept_replay_path;      // where its replay is kept, or would be (CAPTURE.replay.json)
  std::optional<KeptReplay> replay;  // its replay, when kept there
  std::string replay_problem;        // why a kept replay could not be read
  RunEnvironment environment;
};

// `report` holds the edges and the audit the picture marks.
StatusOr<PageSources> readPageSources(const store::RunData& run, const Report& report);

}  // namespace nanprov::report
