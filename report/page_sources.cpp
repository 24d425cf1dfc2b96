#include "report/page_sources.h"

#include <cstdint>

#include "base/numbers.h"
#include "replay/known_issues.h"
#include "report/report.h"
#include "store/capture_file.h"
#include "store/meta_values.h"
#include "store/reader.h"
#include "store/replay_verdicts.h"

namespace nanprov::report {
namespace {

using nlohmann::json;

// The capture whose replay the page shows: the first edge's, else (when attention was not the
// origin) the first source edge's, which is what nanprov run captures by default.
std::string edgeCapture(const Report& report) {
  for (const std::optional<EdgeCall>* edge : {&report.first_edge, &report.first_source_edge}) {
    if (*edge && (*edge)->capture && !(*edge)->capture->path.empty()) return (*edge)->capture->path;
  }
  return "";
}

std::optional<std::string> textOf(const json& doc, const char* key) {
  auto it = doc.is_object() ? doc.find(key) : doc.end();
  return doc.is_object() && it != doc.end() && it->is_string() ? std::optional<std::string>(it->get<std::string>())
                                                               : std::nullopt;
}

// What the page needs of a replay's JSON (replay/replay_render.cpp); a field of another type is
// shown as missing, since anyone may have edited the file.
KeptReplay keptReplayOf(const json& doc) {
  KeptReplay kept{.replayed_on = textOf(doc, "replayed_on"), .captured_on = textOf(doc, "captured_on")};
  if (auto cause = doc.find("root_cause"); cause != doc.end()) {
    kept.root_cause = textOf(*cause, "class");
    kept.explanation = textOf(*cause, "explanation");
  }
  auto tensorsOf = [](const json& b) { return judgementsOf(b.is_object() ? b.value("tensors", json()) : json()); };
  if (auto captured = doc.find("captured"); captured != doc.end() && captured->is_object()) {
    kept.rows.push_back({.captured = true, .tensors = tensorsOf(*captured)});
  }
  if (auto backends = doc.find("backends"); backends != doc.end() && backends->is_array()) {
    for (const json& b : *backends) {
      kept.rows.push_back({.name = textOf(b, "name").value_or(""),
                           .original = b.is_object() && b.value("original", json()) == true,
                           .supported = textOf(b, "status") != "unsupported",
                           .detail = textOf(b, "detail").value_or(""),
                           .tensors = tensorsOf(b)});
    }
  }
  if (auto issues = doc.find("known_issues"); issues != doc.end()) kept.known_issues = knownIssueNotesOf(*issues);
  return kept;
}

// CUDA's integer runtime version (12080) as "12.8".
std::string cudaVersionText(const std::string& v) {
  const std::optional<int64_t> n = parseInteger(v, 1, INT64_MAX);
  if (!n) return v;
  return std::to_string(*n / 1000) + "." + std::to_string(*n % 1000 / 10);
}

// From a meta that names the GPU: the cuda_runtime, cudnn and gpu entries, in the page's words.
RunEnvironment environmentOf(const store::StoreMeta& meta) {
  RunEnvironment env;
  if (const std::string* cuda = store::metaText(meta, "cuda_runtime")) env.cuda_runtime = cudaVersionText(*cuda);
  if (const std::string* cudnn = store::metaText(meta, "cudnn")) {
    env.cudnn = replay::cudnnVersionText(parseInteger(*cudnn, 0, INT64_MAX).value_or(0));
  }
  if (const std::string* gpu = store::metaText(meta, "gpu")) env.gpu = *gpu;
  return env;
}

}  // namespace

StatusOr<PageSources> readPageSources(const store::RunData& run, const Report& report) {
  PageSources sources;
  const CallRecord* first = report.first_edge ? &report.first_edge->call : nullptr;
  const CallRecord* first_source = report.first_source_edge ? &report.first_source_edge->call : nullptr;
  if (first && first_source && first->rank == first_source->rank && first->seq == first_source->seq)
    first_source = nullptr;
  NANPROV_ASSIGN_OR_RETURN(sources.picture,
                           drawHealthPicture(run, report.conclusion.audit.findings, first, first_source));
  sources.capture = edgeCapture(report);
  if (!sources.capture.empty()) {
    sources.kept_replay_path = store::replayVerdictsPath(sources.capture);
    // A damaged kept replay costs the page its matrix, not the whole page.
    auto replay = store::readReplayVerdicts(sources.capture);
    if (!replay.ok()) sources.replay_problem = replay.status().message();
    else if (*replay) sources.replay = keptReplayOf(**replay);
  }
  // The versions and GPU a rank ran with are in its store's meta (probes/libtorch/probes.h); a
  // store older than that meta leaves them to a capture's own.
  for (const store::RankInfo& r : run.ranks) {
    if (!r.meta.count("gpu")) continue;
    sources.environment = environmentOf(r.meta);
    return sources;
  }
  for (const CaptureRecord& c : run.captures) {
    if (c.path.empty()) continue;
    auto meta = store::readCaptureMetadata(run.capturePath(c));
    if (!meta.ok() || !meta->count("gpu")) continue;
    sources.environment = environmentOf(*meta);
    break;
  }
  return sources;
}

}  // namespace nanprov::report
