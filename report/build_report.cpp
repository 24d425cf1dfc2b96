#include "report/build_report.h"

#include <algorithm>

#include "base/records/roles.h"
#include "store/reader.h"

namespace nanprov::report {
namespace {

// The largest |x| among a call's finite inputs (masks aside).
double largestFiniteInput(const CallRecord& c) {
  double largest = 0;
  for (const TensorHealth& t : c.tensors) {
    bool output = isOutputRole(c.phase, t.role);
    if (!output && t.role != Role::kMask && t.nan + t.posinf + t.neginf == 0) largest = std::max(largest, t.max_abs);
  }
  return largest;
}

// The calls of a run are ordered by (step, time): the attention forward before `index` on its
// rank, in its step, is the nearest such call before it.
InputTrail inputTrail(const store::RunData& run, size_t index) {
  const CallRecord& c = run.calls[index];
  InputTrail trail{.largest = largestFiniteInput(c)};
  for (size_t i = index; i-- > 0;) {
    const CallRecord& p = run.calls[i];
    if (p.step != c.step) break;
    if (p.rank == c.rank && p.phase == Phase::kForward && !p.recompute) {
      trail.previous = p;
      trail.previous_largest = largestFiniteInput(p);
      break;
    }
  }
  return trail;
}

const store::RankInfo* rankOf(const store::RunData& run, int rank) {
  for (const store::RankInfo& r : run.ranks) {
    if (r.rank == rank) return &r;
  }
  return nullptr;
}

EdgeCall edgeOf(const store::RunData& run, const CallKernelIndex& kernels, const CallRecord& c,
                const CallHealth& health) {
  EdgeCall edge{.call = c, .health = health, .kernels = kernels.of(c), .largest_finite_input = largestFiniteInput(c)};
  if (const CaptureRecord* capture = run.captureOf(c.rank, c.seq)) {
    edge.capture =
        EdgeCapture{.path = capture->path.empty() ? "" : run.capturePath(*capture), .skipped = capture->skipped};
  }
  const store::RankInfo* rank = rankOf(run, c.rank);
  if (rank && rank->counters.mesh) edge.mesh = *rank->counters.mesh;
  edge.device = rank ? rank->device.forDevice(c.device) : DeviceIdentity{.device = c.device.name()};
  return edge;
}

}  // namespace

StatusOr<Report> buildReport(const store::RunData& run, const ReportOptions& options) {
  return buildReport(run, analyze(run), options);
}

StatusOr<Report> buildReport(const store::RunData& run, Findings findings, const ReportOptions& options) {
  Report r{.run = runOverviewOf(run), .origin = findings.origin, .propagation = findings.propagation};
  const CallKernelIndex kernels(run);
  if (findings.first) {
    r.first_edge = edgeOf(run, kernels, run.calls[*findings.first], findings.first_health);
    if (findings.origin == Origin::kAttention) r.input_trail = inputTrail(run, *findings.first);
  }
  if (findings.first_source) {
    // The first edge again when attention made the first values: its kernels are read once.
    const CallRecord& c = run.calls[*findings.first_source];
    r.first_source_edge =
        findings.first_source == findings.first ? *r.first_edge : edgeOf(run, kernels, c, classify(c));
    const store::RankInfo* rank = rankOf(run, c.rank);
    r.source_issues = knownIssuesOfCall(c, rank ? rank->meta : std::map<std::string, std::string>{});
  }
  r.first_module = firstModule(run, findings);
  r.conclusion = conclude(run, findings, r.first_module);
  // The first step whose values went non-finite, an edge's or the sentinel's, for the trends.
  std::optional<int64_t> nonfinite_step;
  if (r.first_edge) nonfinite_step = r.first_edge->call.step;
  if (r.conclusion.sentinel && (!nonfinite_step || r.conclusion.sentinel->step < *nonfinite_step)) {
    nonfinite_step = r.conclusion.sentinel->step;
  }
  r.trends = trendsOf(run, nonfinite_step);
  if (options.page) {
    NANPROV_ASSIGN_OR_RETURN(r.page, readPageSources(run, r));
  }
  return r;
}

}  // namespace nanprov::report
