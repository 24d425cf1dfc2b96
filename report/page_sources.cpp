#include "report/page_sources.h"

#include "store/capture_file.h"
#include "store/replay_verdicts.h"

namespace nanprov {
namespace {

// The capture whose replay the page shows: the first edge's, else (when attention was not the
// origin) the first source edge's, which is what nanprov run captures by default.
const CaptureRecord* edgeCapture(const Report& report) {
  const RunData& run = *report.run;
  for (const std::optional<size_t>& at : {report.findings.first, report.findings.first_source}) {
    if (!at) continue;
    const CallRecord& c = run.calls[*at];
    if (const CaptureRecord* capture = run.captureOf(c.rank, c.seq); capture && !capture->path.empty()) return capture;
  }
  return nullptr;
}

}  // namespace

StatusOr<PageSources> readPageSources(const Report& report) {
  PageSources sources;
  NANPROV_ASSIGN_OR_RETURN(sources.picture, drawHealthPicture(report));
  const RunData& run = *report.run;
  if (const CaptureRecord* capture = edgeCapture(report)) {
    sources.capture = run.capturePath(*capture);
    // A damaged kept replay costs the page its matrix, not the whole page.
    auto replay = readReplayVerdicts(sources.capture);
    if (replay.ok()) sources.replay = std::move(*replay);
    else sources.replay_problem = replay.status().message();
  }
  // The versions and GPU a rank ran with are in its store's meta (probes/libtorch/probes.h); a
  // store older than that meta leaves them to a capture's own.
  for (const RankInfo& r : run.ranks) {
    if (!r.meta.count("gpu")) continue;
    for (const char* key : {"cuda_runtime", "cudnn", "gpu"}) {
      if (r.meta.count(key)) sources.environment[key] = r.meta.at(key);
    }
    break;
  }
  for (const CaptureRecord& c : run.captures) {
    if (!sources.environment.empty()) break;
    if (c.path.empty()) continue;
    auto meta = readCaptureMetadata(run.capturePath(c));
    if (!meta.ok() || !meta->count("gpu")) continue;
    for (const char* key : {"cuda_runtime", "cudnn", "gpu"}) {
      if (meta->count(key)) sources.environment[key] = meta->at(key);
    }
    break;
  }
  return sources;
}

}  // namespace nanprov
