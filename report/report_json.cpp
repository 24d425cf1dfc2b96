#include "report/report_json.h"

#include <algorithm>

#include "base/records/call_name.h"
#include "base/records/roles.h"

namespace nanprov::report {
namespace {

using nlohmann::json;

json coverageJson(const RunOverview& run) {
  json unprobed = json::array();
  for (const UncheckedAttention& u : run.unchecked) {
    unprobed.push_back({{"what", u.what},
                        {"kind", u.kind},
                        {"count", u.count},
                        {"probe_module", u.probe_module.empty() ? json(nullptr) : json(u.probe_module)}});
  }
  const Summarised& sum = run.summarised;
  json summarised = nullptr;
  if (sum.calls) {
    summarised = {{"calls", sum.calls},         {"first_step", sum.first_step}, {"last_step", sum.last_step},
                  {"steps_per_row", sum.every}, {"ranks", sum.ranks},           {"not_clean", sum.not_clean}};
  }
  json coverage = {{"attention_calls", run.calls},
                   {"calls_not_stored", run.calls_not_stored},
                   {"summarised", summarised},
                   {"unprobed", unprobed},
                   {"suggested_probe_modules", run.suggested_probe_modules},
                   {"damage", run.damage}};
  // Only where a store's writes failed: a run whose writes all landed reads as before.
  if (!run.incomplete.empty()) coverage["incomplete"] = run.incomplete;
  return coverage;
}

// The ranks whose workers could not write their store, and why. With the ranks absent from the
// directories given they are the job's missing ranks, which make the report partial.
json unrecordedJson(const RunOverview& run) {
  json unrecorded = json::array();
  for (const auto& [rank, why] : run.unrecorded) {
    bool read = std::find(run.missing_ranks.begin(), run.missing_ranks.end(), rank) == run.missing_ranks.end();
    unrecorded.push_back({{"rank", rank}, {"why", why}, {"store_read", read}});
  }
  return unrecorded;
}

json ranksJson(const RunOverview& run) {
  json ranks = json::array();
  for (const RankOverview& r : run.ranks)
    ranks.push_back({{"rank", r.rank}, {"store", r.store}, {"steps", r.steps}, {"meta", r.meta}});
  return ranks;
}

json sentinelJson(const std::optional<SentinelFinding>& s) {
  if (!s) return nullptr;
  std::vector<std::string> all = s->gradients;
  for (const std::string& v : s->values) {
    if (std::find(all.begin(), all.end(), v) == all.end()) all.push_back(v);
  }
  return {{"rank", s->rank},         {"step", s->step},           {"parameters", all},
          {"nonfinite", all.size()}, {"gradients", s->gradients}, {"values", s->values}};
}

json collectivePathsJson(const Conclusion& c) {
  json paths = json::array();
  for (const CollectivePath& p : c.collective_paths) paths.push_back(collectivePathJson(p));
  return paths;
}

json matchesJson(const std::vector<IssueMatchNote>& matches) {
  std::vector<KnownIssueNote> issues;
  for (const IssueMatchNote& m : matches) issues.push_back(m.issue);
  return knownIssuesJson(issues);
}

json possibleJson(const std::vector<PossibleIssueNote>& possible) {
  json out = json::array();
  for (const PossibleIssueNote& m : possible) {
    out.push_back({{"id", m.id}, {"url", m.url}, {"title", m.title}, {"undecided", m.undecided}});
  }
  return out;
}

json trailJson(const std::optional<InputTrail>& t) {
  if (!t) return nullptr;
  const std::optional<CallRecord>& previous = t->previous;
  return {{"largest_abs", t->largest},
          {"previous_call", previous ? json(callName(*previous)) : json(nullptr)},
          {"previous_module", previous ? json(previous->module) : json(nullptr)},
          {"previous_largest_abs", previous ? json(t->previous_largest) : json(nullptr)}};
}

// An edge: the call, and what the report says of it beyond the call itself (its kernels, its capture).
json edgeJson(const EdgeCall& edge) {
  json out = callJson(edge.call, edge.health);
  out["kernels"] = kernelsJson(edge.kernels.kernels);
  out["kernels_from"] = edge.kernels.from.empty() ? json(nullptr) : json(edge.kernels.from);
  out["kernel_attribution"] = edge.kernels.attribution;
  const std::optional<EdgeCapture>& capture = edge.capture;
  out["capture"] = capture && !capture->path.empty() ? json(capture->path) : json(nullptr);
  out["capture_skipped"] = capture && capture->path.empty() ? json(capture->skipped) : json(nullptr);
  out["device_identity"] = deviceIdentityJson(edge.device);
  return out;
}

}  // namespace

json deviceIdentityJson(const DeviceIdentity& id) {
  auto text = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
  return {{"host", text(id.host)},
          {"device", text(id.device)},
          {"gpu", text(id.gpu)},
          {"gpu_uuid", text(id.gpu_uuid)},
          {"pci_bus_id", text(id.pci_bus_id)},
          {"driver", text(id.driver)},
          {"cuda_driver", text(id.cuda_driver)},
          {"cudnn", text(id.cudnn)}};
}

json callJson(const CallRecord& call, const CallHealth& health) {
  json counts = json::object();
  json tensors = json::array();
  for (const TensorHealth& t : call.tensors) {
    counts[roleName(t.role)] = {{"nan", t.nan}, {"posinf", t.posinf}, {"neginf", t.neginf}, {"numel", t.numel}};
    json tj = {{"role", roleName(t.role)}, {"dtype", t.dtype.str()}, {"shape", t.shape.text()},
               {"numel", t.numel},         {"nan", t.nan},           {"posinf", t.posinf},
               {"neginf", t.neginf},       {"max_abs", t.max_abs},   {"all_zero", t.all_zero}};
    if (t.masked_rows >= 0) tj["masked_rows"] = t.masked_rows;                  // rows of the mask tensor itself
    if (auto rows = maskedQueryRows(call, t)) tj["masked_query_rows"] = *rows;  // replay's unit
    tensors.push_back(tj);
  }
  return {{"name", callName(call)},
          {"rank", call.rank},
          {"layer", call.layer},
          {"call", call.call},
          {"seq", call.seq},
          {"step", call.step},
          {"phase", phaseName(call.phase)},
          {"fwd_seq", call.fwd_seq >= 0 ? json(call.fwd_seq) : json(nullptr)},
          {"recompute", call.recompute},
          {"op", call.op},
          {"backend", call.backend},
          {"module", call.module},
          {"start_ns", call.start_ns},
          {"end_ns", call.end_ns},
          {"kind", edgeKindName(health.kind)},
          {"inputs_finite", health.inputs_finite},
          {"nonfinite_inputs", health.nonfinite_inputs},
          {"nonfinite_outputs", health.nonfinite_outputs},
          {"device", call.device.name()},
          {"unattributed", call.unattributed.empty() ? json(nullptr) : json(call.unattributed)},
          {"injected", !call.injected.empty()},
          {"injected_tensor", call.injected.empty() ? json(nullptr) : json(call.injected)},
          // Tensors changed in place before their deferred check: left out of "tensors" and "counts".
          {"modified_before_check", call.modified.empty() ? json(nullptr) : json(call.modified)},
          // null where neither the op nor its probe says (FlashAttention's, FlexAttention's calls).
          {"dropout_p", call.dropout_p ? json(*call.dropout_p) : json(nullptr)},
          {"counts", counts},
          {"tensors", tensors}};
}

namespace {

// The replicas compared (report/replica_check.h): what was compared, or why nothing was, and the
// first step at which a rank's parameters differed from its replicas'.
json replicasJson(const ReplicaCheck& r) {
  json divergence = nullptr;
  if (const auto& d = r.first_divergence) {
    divergence = {{"step", d->step},
                  {"rank", d->ranks.size() == 1 && d->by_majority ? json(d->ranks.front()) : json(nullptr)},
                  {"ranks", d->ranks},
                  {"by_majority", d->by_majority},
                  {"parameter", d->parameter}};
  }
  return {{"checked", r.checked},
          {"reason", r.checked ? json(nullptr) : json(r.why_not)},
          {"ranks", r.ranks},
          {"groups", r.groups},
          {"steps", r.steps},
          {"sharded", r.sharded},
          {"first_divergence", divergence}};
}

}  // namespace

json reportJson(const Report& report) {
  const RunOverview& run = report.run;
  const Conclusion& conclusion = report.conclusion;
  const Propagation& p = report.propagation;
  json out = {
      {"run", run.dir},
      {"clean", conclusion.outcome == Outcome::kClean},
      {"outcome", outcomeName(conclusion.outcome)},
      {"nothing_checked_why",
       conclusion.nothing_checked_why.empty() ? json(nullptr) : json(conclusion.nothing_checked_why)},
      // A rank saw non-finite values whose rows never reached its store (outcome unattributed).
      {"nonfinite_not_stored", conclusion.nonfinite_not_stored ? json{{"rank", conclusion.nonfinite_not_stored->rank},
                                                                      {"step", conclusion.nonfinite_not_stored->step}}
                                                               : json(nullptr)},
      {"step_unit", stepUnitName(run.step_unit)},
      {"summary", {{"ranks", run.ranksRan()}, {"calls", run.calls}, {"steps", run.steps}}},
      {"coverage", coverageJson(run)},
      {"gradient_sentinel", sentinelJson(conclusion.sentinel)},
      {"collective_paths", collectivePathsJson(conclusion)},
      {"unchecked_attention_by_sentinel_step", conclusion.unchecked_by_sentinel_step},
      {"unchecked_attention_by_edge_step", conclusion.unchecked_by_edge_step},
      {"made_in_unchecked_attention", conclusion.made_in_unchecked_attention},
      {"ranks", ranksJson(run)},
      {"run_dirs", run.dirs},
      {"clocks_differ", run.clocks_differ},
      {"world_size", run.world_size},
      {"job", run.job.empty() ? json(nullptr) : json(run.job)},  // Slurm's job.step, or torchrun's --rdzv-id
      {"missing_ranks", run.missing_ranks},
      {"unrecorded_ranks", unrecordedJson(run)},
      {"trail", {{"on", run.trail_on}, {"compiled_code_unchecked", run.trail_missed_compiled_code}}},
      {"first_module", firstModuleJson(report.first_module)},
      {"first_edge", nullptr},
      {"first_source_edge", nullptr},
      {"propagation", {{"calls", p.calls}, {"layers", p.layers}, {"ranks", p.ranks}}},
      {"audit", auditCostJson(conclusion.audit)},
      {"audit_findings", auditFindingsJson(conclusion.audit)},
      {"replicas", replicasJson(conclusion.replicas)},
      {"known_issues", matchesJson(report.source_issues.matches)},
      {"possible_known_issues", possibleJson(report.source_issues.possible)},
      {"trends", trendsJson(report.trends)},
  };
  if (report.first_edge) {
    json edge = edgeJson(*report.first_edge);
    edge["origin"] = originName(report.origin);
    edge["input_trail"] = trailJson(report.input_trail);
    out["first_edge"] = edge;
  }
  if (report.first_source_edge) out["first_source_edge"] = edgeJson(*report.first_source_edge);
  return out;
}

}  // namespace nanprov::report
