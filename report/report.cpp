#include "report/report.h"

#include <cstdio>
#include <filesystem>
#include <set>
#include <algorithm>
#include <sstream>

#include "base/text.h"
#include "report/call_kernels.h"
#include "report/terminal_text.h"
#include "report/unchecked_attention.h"
#include "store/job.h"
#include "store/meta_values.h"
#include "base/records/roles.h"

namespace nanprov {
namespace {

// "O: 4096 NaN of 4096" / "Q: 12 +Inf, 3 -Inf of 8192"
std::string describeBad(const TensorHealth& t) {
  std::vector<std::string> parts;
  if (t.nan) parts.push_back(std::to_string(t.nan) + " NaN");
  if (t.posinf) parts.push_back(std::to_string(t.posinf) + " +Inf");
  if (t.neginf) parts.push_back(std::to_string(t.neginf) + " -Inf");
  return std::string(roleName(t.role)) + ": " + joined(parts, ", ") + " of " + std::to_string(t.numel);
}

int64_t totalSteps(const RunData& run) {
  int64_t steps = 0;
  for (const RankInfo& r : run.ranks) steps = std::max(steps, r.steps);
  return steps;
}

// "attention not checked: flex_attention x12, ..." and, on a line of its own, the one
// --probe-module that would check them; empty when nothing went unchecked.
std::string unprobedLines(const RunData& run) {
  std::vector<std::string> parts;
  for (const UncheckedAttention& u : uncheckedAttention(run)) parts.push_back(u.kind + " x" + std::to_string(u.count));
  if (parts.empty()) return "";
  const std::string suggestion = suggestionText(suggestedProbeModules(run));
  return "  attention not checked: " + joined(parts, ", ") + "\n" + (suggestion.empty() ? "" : "    " + suggestion + "\n");
}

nlohmann::json coverageJson(const RunData& run) {
  nlohmann::json unprobed = nlohmann::json::array();
  for (const UncheckedAttention& u : uncheckedAttention(run)) {
    unprobed.push_back({{"what", u.what}, {"kind", u.kind}, {"count", u.count},
                        {"probe_module", u.probe_module.empty() ? nlohmann::json(nullptr) : nlohmann::json(u.probe_module)}});
  }
  const Summarised sum = run.summarised();
  nlohmann::json summarised = nullptr;
  if (sum.calls) {
    summarised = {{"calls", sum.calls}, {"first_step", sum.first_step}, {"last_step", sum.last_step},
                  {"steps_per_row", sum.every}, {"ranks", sum.ranks}, {"not_clean", sum.not_clean}};
  }
  return {{"attention_calls", run.total_calls},
          {"calls_not_stored", run.callsNotStored()},
          {"summarised", summarised},
          {"unprobed", unprobed},
          {"suggested_probe_modules", suggestedProbeModules(run)},
          {"damage", run.damage}};
}

// The ranks whose workers could not write their store, and why. With the ranks absent from the
// directories given they are the job's missing ranks, which make the report partial.
nlohmann::json unrecordedJson(const RunData& run) {
  nlohmann::json unrecorded = nlohmann::json::array();
  const std::vector<int> missing = run.missingRanks();
  for (const auto& [rank, why] : run.unrecorded) {
    bool read = std::find(missing.begin(), missing.end(), rank) == missing.end();
    unrecorded.push_back({{"rank", rank}, {"why", why}, {"store_read", read}});
  }
  return unrecorded;
}

// Lines for the ranks not read, and for a job read from several directories; "" when neither.
std::string ranksNotReadText(const RunData& run) {
  std::string out;
  std::vector<std::string> unrecorded, absent;
  const std::vector<int> missing = run.missingRanks();
  for (int rank : missing) {
    auto it = run.unrecorded.find(rank);
    if (it == run.unrecorded.end()) absent.push_back(std::to_string(rank));
    else unrecorded.push_back(std::to_string(rank) + " (" + printable(it->second) + ")");
  }
  if (!unrecorded.empty()) {
    out += "  NOT RECORDED: rank " + joined(unrecorded, ", rank ") + ": its worker trained without a store\n";
  }
  for (const auto& [rank, why] : run.unrecorded) {
    if (std::find(missing.begin(), missing.end(), rank) != missing.end()) continue;
    out += "  NOT RECORDED: a second process of rank " + std::to_string(rank) + " (" + printable(why) +
           "); the rank's store read is the first process's\n";
  }
  if (!absent.empty()) {
    out += "  partial: rank" + std::string(absent.size() == 1 ? " " : "s ") + joined(absent, ", ") + " of world size " +
           std::to_string(run.worldSize()) + (absent.size() == 1 ? " has" : " have") +
           " no store in the directories given (it recorded no attention call, or it ran on a node whose "
           "run directory was not given)\n";
  }
  if (run.dirs.size() > 1) {
    std::vector<std::string> dirs;
    for (const std::string& d : run.dirs) dirs.push_back(printable(d));
    out += "  one job from " + std::to_string(run.dirs.size()) + " run directories (" + joined(dirs, ", ") +
           "): calls are ordered by step first, then by time; clocks differ between hosts\n";
  }
  return out;
}

nlohmann::json sentinelJson(const std::optional<SentinelFinding>& s) {
  if (!s) return nullptr;
  std::vector<std::string> all = s->gradients;
  for (const std::string& v : s->values) {
    if (std::find(all.begin(), all.end(), v) == all.end()) all.push_back(v);
  }
  return {{"rank", s->rank},           {"step", s->step},       {"parameters", all},
          {"nonfinite", all.size()},   {"gradients", s->gradients}, {"values", s->values}};
}

// The first few names, then how many more: the whole model's parameters go NaN after a step.
std::string listed(const std::vector<std::string>& names) {
  constexpr size_t kShown = 5;
  if (names.empty()) return "-";
  if (names.size() <= kShown) return joined(names, ", ");
  std::vector<std::string> first(names.begin(), names.begin() + kShown);
  return joined(first, ", ") + " and " + std::to_string(names.size() - kShown) + " more";
}

nlohmann::json collectivePathsJson(const RunData& run, const Conclusion& c) {
  nlohmann::json paths = nlohmann::json::array();
  for (const CollectivePath& p : c.collective_paths) paths.push_back(collectivePathJson(p, sentinelGradients(run, p.rank, p.step)));
  return paths;
}

// One line per rank that received non-finite values through a collective.
std::string collectivePathsText(const RunData& run, const Conclusion& c) {
  std::string out;
  for (const CollectivePath& p : c.collective_paths) {
    out += "  " + collectivePathText(run, p, listed(sentinelGradients(run, p.rank, p.step))) + "\n";
  }
  return out;
}

// What the report says about an edge beyond the call itself: its kernels and its capture.
void addKernelsAndCapture(const RunData& run, const CallKernelIndex& index, const CallRecord& call, nlohmann::json& edge) {
  KernelsOfCall k = index.of(call);
  edge["kernels"] = kernelsJson(k.kernels);
  edge["kernels_from"] = k.from.empty() ? nlohmann::json(nullptr) : nlohmann::json(k.from);
  edge["kernel_attribution"] = k.attribution;
  const CaptureRecord* capture = run.captureOf(call.rank, call.seq);
  edge["capture"] = capture && !capture->path.empty() ? nlohmann::json(run.capturePath(*capture)) : nlohmann::json(nullptr);
  edge["capture_skipped"] = capture && capture->path.empty() ? nlohmann::json(capture->skipped) : nlohmann::json(nullptr);
}

}  // namespace

std::string maskedRowsText(const CallRecord& call, const TensorHealth& mask) {
  if (auto rows = maskedQueryRows(call, mask)) return std::to_string(*rows) + " " + kMaskedRowsUnit;
  return std::to_string(mask.masked_rows) + " rows of the mask " + mask.shape.text() + " have every key masked";
}

std::string summaryLine(const RunData& run) {
  std::ostringstream out;
  bool passes = run.stepUnit() == StepUnit::kForwardPass;
  out << "run " << printable(run.dir) << ": " << run.ranks.size() << (run.ranks.size() == 1 ? " rank, " : " ranks, ")
      << run.total_calls << " attention calls checked, " << (passes ? totalSteps(run) + 1 : totalSteps(run))
      << (passes ? " forward passes" : " optimizer steps");
  // The tally outlives the process; the store keeps only what the writer committed.
  if (int64_t lost = run.callsNotStored()) {
    out << "\n  the last " << lost << (lost == 1 ? " call was" : " calls were")
        << " not stored: the process ended before they reached the store (killed, or it exited "
           "by a path that runs no exit hook)";
  }
  if (std::string summarised = summarisedText(run); !summarised.empty()) out << "\n  summarised: " << summarised;
  for (const std::string& damage : run.damage) out << "\n  damaged: " << printable(damage);
  return out.str();
}

std::string summarisedText(const RunData& run) {
  const Summarised s = run.summarised();
  if (!s.calls) return "";
  const std::string which = s.not_clean ? " calls (" + std::to_string(s.not_clean) + " of them not clean)" : " clean calls";
  return std::to_string(s.calls) + which + " of steps " + std::to_string(s.first_step) + "-" +
         std::to_string(s.last_step) + " kept only as counts and max |x| per (step, layer, phase)" +
         (s.every > 1 ? ", up to " + std::to_string(s.every) + " steps a row" : std::string()) +
         " (nanprov run --store-budget); " +
         (s.not_clean ? "the first steps that were not clean are kept in full"
                      : "every call that was not clean is kept in full");
}

nlohmann::json callJson(const CallRecord& call, const CallHealth& health) {
  nlohmann::json counts = nlohmann::json::object();
  nlohmann::json tensors = nlohmann::json::array();
  for (const TensorHealth& t : call.tensors) {
    counts[roleName(t.role)] = {{"nan", t.nan}, {"posinf", t.posinf}, {"neginf", t.neginf}, {"numel", t.numel}};
    nlohmann::json tj = {{"role", roleName(t.role)}, {"dtype", t.dtype.str()}, {"shape", t.shape.text()},
                         {"numel", t.numel},     {"nan", t.nan},       {"posinf", t.posinf},
                         {"neginf", t.neginf},   {"max_abs", t.max_abs}, {"all_zero", t.all_zero}};
    if (t.masked_rows >= 0) tj["masked_rows"] = t.masked_rows;  // rows of the mask tensor itself
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
          {"fwd_seq", call.fwd_seq >= 0 ? nlohmann::json(call.fwd_seq) : nlohmann::json(nullptr)},
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
          {"unattributed", call.unattributed.empty() ? nlohmann::json(nullptr) : nlohmann::json(call.unattributed)},
          {"injected", !call.injected.empty()},
          {"injected_tensor", call.injected.empty() ? nlohmann::json(nullptr) : nlohmann::json(call.injected)},
          // Tensors changed in place before their deferred check: left out of "tensors" and "counts".
          {"modified_before_check", call.modified.empty() ? nlohmann::json(nullptr) : nlohmann::json(call.modified)},
          // null where neither the op nor its probe says (FlashAttention's, FlexAttention's calls).
          {"dropout_p", call.dropout_p ? nlohmann::json(*call.dropout_p) : nlohmann::json(nullptr)},
          {"counts", counts},
          {"tensors", tensors}};
}

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

// Where a forward edge's large inputs came from, as far as attention saw: the attention forward
// call before it in the same step on the same rank, if any. No earlier call means the values
// came from the batch or the modules before the first attention.
// Inputs above this are unusual for attention in any dtype, and the text says where they came from.
constexpr double kLargeInput = 1e4;

struct InputTrail {
  double largest = 0;
  const CallRecord* previous = nullptr;
  double previous_largest = 0;
};

std::optional<InputTrail> inputTrail(const RunData& run, size_t index) {
  const CallRecord& c = run.calls[index];
  if (c.phase != Phase::kForward) return std::nullopt;
  InputTrail trail;
  trail.largest = largestFiniteInput(c);
  for (size_t i = index; i-- > 0;) {
    const CallRecord& p = run.calls[i];
    if (p.step != c.step) break;
    if (p.rank == c.rank && p.phase == Phase::kForward && !p.recompute) {
      trail.previous = &p;
      trail.previous_largest = largestFiniteInput(p);
      break;
    }
  }
  return trail;
}

nlohmann::json trailJson(const std::optional<InputTrail>& t) {
  if (!t) return nullptr;
  return {{"largest_abs", t->largest},
          {"previous_call", t->previous ? nlohmann::json(callName(*t->previous)) : nlohmann::json(nullptr)},
          {"previous_module", t->previous ? nlohmann::json(t->previous->module) : nlohmann::json(nullptr)},
          {"previous_largest_abs", t->previous ? nlohmann::json(t->previous_largest) : nlohmann::json(nullptr)}};
}

std::string trailText(const RunData& run, const CallRecord& c, const InputTrail& t) {
  std::string here = c.module.empty() ? "this call" : c.module;
  if (!t.previous) {
    std::string unit = run.stepUnit() == StepUnit::kForwardPass ? "forward pass" : "step";
    return "it is the " + unit + "'s first attention call: the large inputs came with the batch or from the modules in or before " + here;
  }
  std::string before = t.previous->module.empty() ? callName(*t.previous) : t.previous->module;
  return "the attention call before it, " + callName(*t.previous) + " (" + before + "), had inputs up to " +
         shortNumber(t.previous_largest) + ": they grew between " + before + " and " + here;
}

}  // namespace

Report buildReport(const RunData& run) { return buildReport(run, analyze(run)); }

Report buildReport(const RunData& run, Findings findings) {
  Report r{.run = &run, .findings = std::move(findings)};
  r.first_module = firstModule(run, r.findings);
  r.conclusion = conclude(run, r.findings, r.first_module);
  std::optional<int64_t> nonfinite_step;
  if (r.findings.first) nonfinite_step = run.calls[*r.findings.first].step;
  if (r.conclusion.sentinel && (!nonfinite_step || r.conclusion.sentinel->step < *nonfinite_step)) {
    nonfinite_step = r.conclusion.sentinel->step;
  }
  r.trends = trendsOf(run, nonfinite_step);
  if (r.findings.first_source) {
    const CallRecord& c = run.calls[*r.findings.first_source];
    std::map<std::string, std::string> meta;
    for (const RankInfo& rank : run.ranks) {
      if (rank.rank == c.rank) meta = rank.meta;
    }
    r.source_issues = knownIssuesOfCall(c, meta);
  }
  return r;
}

nlohmann::json reportJson(const Report& report) {
  const RunData& run = *report.run;
  const Findings& f = report.findings;
  const Conclusion& conclusion = report.conclusion;
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankInfo& r : run.ranks) {
    ranks.push_back({{"rank", r.rank}, {"store", r.path}, {"steps", r.steps}, {"meta", r.meta}});
  }
  nlohmann::json out = {
      {"run", run.dir},
      {"clean", conclusion.outcome == Outcome::kClean},
      {"outcome", outcomeName(conclusion.outcome)},
      {"nothing_checked_why", conclusion.nothing_checked_why.empty() ? nlohmann::json(nullptr)
                                                                      : nlohmann::json(conclusion.nothing_checked_why)},
      {"step_unit", stepUnitName(run.stepUnit())},
      {"summary", {{"ranks", run.ranks.size()}, {"calls", run.total_calls}, {"steps", totalSteps(run)}}},
      {"coverage", coverageJson(run)},
      {"gradient_sentinel", sentinelJson(conclusion.sentinel)},
      {"collective_paths", collectivePathsJson(run, conclusion)},
      {"unchecked_attention_by_sentinel_step", conclusion.unchecked_by_sentinel_step},
      {"unchecked_attention_by_edge_step", conclusion.unchecked_by_edge_step},
      {"made_in_unchecked_attention", conclusion.made_in_unchecked_attention},
      {"ranks", ranks},
      {"run_dirs", run.dirs},
      {"clocks_differ", run.acrossHosts()},
      {"world_size", run.worldSize()},
      {"job", jobIdOf(run).empty() ? nlohmann::json(nullptr) : nlohmann::json(jobIdOf(run))},  // Slurm's job.step, or torchrun's --rdzv-id
      {"missing_ranks", run.missingRanks()},
      {"unrecorded_ranks", unrecordedJson(run)},
      {"trail", {{"on", run.trailOn()}, {"compiled_code_unchecked", trailMissedCompiledCode(run)}}},
      {"first_module", firstModuleJson(run, report.first_module)},
      {"first_edge", nullptr},
      {"first_source_edge", nullptr},
      {"propagation", {{"calls", f.propagation.calls}, {"layers", f.propagation.layers}, {"ranks", f.propagation.ranks}}},
      {"audit", auditCostJson(conclusion.audit)},
      {"audit_findings", auditFindingsJson(conclusion.audit)},
      {"known_issues", replay::matchesJson(report.source_issues.matches)},
      {"possible_known_issues", replay::possibleJson(report.source_issues.possible)},
      {"trends", trendsJson(report.trends)},
  };
  const CallKernelIndex kernels(run);
  if (f.first) {
    nlohmann::json edge = callJson(run.calls[*f.first], f.first_health);
    edge["origin"] = originName(f.origin);
    edge["input_trail"] = f.origin == Origin::kAttention ? trailJson(inputTrail(run, *f.first)) : nlohmann::json(nullptr);
    addKernelsAndCapture(run, kernels, run.calls[*f.first], edge);
    out["first_edge"] = edge;
  }
  if (f.first_source) {
    const CallRecord& c = run.calls[*f.first_source];
    nlohmann::json edge = callJson(c, classify(c));
    addKernelsAndCapture(run, kernels, c, edge);
    out["first_source_edge"] = edge;
  }
  return out;
}

namespace {

// Every report ends alike: the audit's findings and totals (when it ran), the trend warnings, the
// attention that was not checked, and the run's size.
std::string closing(const RunData& run, const Report& report) {
  return auditText(forTerminal(report.conclusion.audit)) + trendsText(forTerminal(report.trends)) + unprobedLines(run) +
         ranksNotReadText(run) + "  " + summaryLine(run) + "\n";
}

// The attention that ran unchecked by then, for the headline's second line: named here only when
// it is not all of what the closing lists (with its counts and the --probe-module) anyway.
std::string uncheckedByThenText(const RunData& run, const std::vector<std::string>& kinds) {
  std::vector<std::string> listed;
  for (const UncheckedAttention& u : uncheckedAttention(run)) listed.push_back(u.kind);
  if (kinds.size() > 1 && kinds == listed) return "every kind listed under 'attention not checked' below";
  return joined(kinds, "; ");
}


}  // namespace

std::string reportText(const Report& report) {
  std::ostringstream out;
  // Concluded from the run as stored (it reads the run's files by their paths), rendered from a
  // copy whose texts are safe to print.
  const Findings& f = report.findings;
  const Conclusion& conclusion = report.conclusion;
  const RunData run = forTerminal(*report.run);
  if (conclusion.outcome == Outcome::kNothingChecked) {
    out << "nothing checked: no attention call was probed, so nanprov cannot call this run clean\n  why: "
        << printable(conclusion.nothing_checked_why) << "\n";
    return out.str() + closing(run, report);
  }
  if (conclusion.sentinel_first) {
    const SentinelFinding& s = *conclusion.sentinel;
    out << "rank" << s.rank << ":" << stepLabel(run, s.step) << "  first non-finite values were gradients, at "
        << stepLabel(run, s.step);
    if (receivedThroughCollective(conclusion.collective_paths).count({s.rank, s.step})) {
      // Every rank's came through a collective: never "outside attention" for what arrived.
      out << ", and they reached this rank through a collective\n";
    } else if (conclusion.made_in_unchecked_attention) {
      // The trail's answer joined to what ran unchecked: inside that attention, its kernel unknown.
      out << ": " << madeInUncheckedAttentionText(run, *report.first_module) << "\n";
    } else if (conclusion.outcome == Outcome::kOutsideAttention) {
      out << ": no probed attention call made them; the origin is outside attention\n";
    } else {
      // Never "outside attention" while attention ran unchecked: it may have made them.
      out << ", but attention ran unchecked by then, so nanprov cannot tell whether attention made them\n"
          << "  unchecked: " << uncheckedByThenText(run, conclusion.unchecked_by_sentinel_step) << "\n";
    }
    if (report.first_module && !conclusion.made_in_unchecked_attention) {
      out << "  the first non-finite value was " << firstModuleText(run, *report.first_module, true) << "\n";
    } else if (!run.trailOn()) {
      out << "  nanprov run --trail names the module that made them\n";
    }
    out << "  non-finite gradients: " << listed(s.gradients) << "\n";
    out << "  non-finite parameters after the update: " << listed(s.values) << "\n";
    out << collectivePathsText(run, conclusion);
    if (f.first) {
      out << "  attention first saw non-finite values later: " << callName(run.calls[*f.first]) << " ("
          << stepLabel(run, run.calls[*f.first].step) << ", " << (f.origin == Origin::kAttention ? "source" : "propagated")
          << ")\n";
    } else {
      out << (run.total_calls == 0 ? "  no attention call was checked\n" : "  every checked attention call was finite\n");
    }
    return out.str() + closing(run, report);
  }
  if (!f.first && conclusion.outcome == Outcome::kAuditFinding) {
    const AuditFinding first = forTerminal(conclusion.audit).findings.front();
    out << first.name << "  audit finding: finite outputs that are " << first.verdict.value_or("?")
        << " against the float64 reference (no value was non-finite)\n";
    return out.str() + closing(run, report);
  }
  if (!f.first) {
    out << (conclusion.outcome == Outcome::kPartial ? "no fault in what was checked, but not everything was: "
                                                    : "clean: ")
        << "every checked attention input and output was finite";
    // Inference runs have no optimizer steps, and so no gradients to vouch for.
    bool training = run.stepUnit() == StepUnit::kOptimizerStep;
    out << (conclusion.sentinel || !training ? "\n" : ", and so were the gradients at every optimizer step\n");
    return out.str() + closing(run, report);
  }
  const CallRecord& c = run.calls[*f.first];
  const CallHealth& h = f.first_health;
  std::string inj = c.injected.empty() ? "" : "  [injected " + c.injected + " by --inject]";
  if (f.origin == Origin::kAttention) {
    out << callName(c) << "  first non-finite edge: finite inputs, non-finite "
        << joined(h.nonfinite_outputs, ", ") << inj << "\n";
  } else if (conclusion.made_in_unchecked_attention) {
    out << callName(c) << "  non-finite " << joined(h.nonfinite_inputs, ", ") << " reached attention from upstream: "
        << madeInUncheckedAttentionText(run, *report.first_module) << inj << "\n";
  } else if (conclusion.outcome == Outcome::kUnattributed) {
    // Never "outside attention" while attention ran unchecked before it: it may have made them.
    out << callName(c) << "  non-finite " << joined(h.nonfinite_inputs, ", ")
        << " reached attention from upstream, but attention ran unchecked by then, so nanprov cannot tell whether "
           "attention made them" << inj << "\n"
        << "  unchecked: " << uncheckedByThenText(run, conclusion.unchecked_by_edge_step) << "\n";
  } else {
    out << callName(c) << "  non-finite " << joined(h.nonfinite_inputs, ", ")
        << " reached attention from upstream: " << upstreamOriginText(run, report.first_module, c) << inj << "\n";
  }
  out << "  " << stepLabel(run, c.step) << ", " << phaseName(c.phase) << (c.recompute ? " (checkpoint recompute)" : "")
      << ", " << c.op << " (" << c.backend << ")";
  if (!c.module.empty()) out << ", module " << c.module;
  // Where a DeviceMesh placed the rank (dp, tp, pp...): which replica or shard made the NaN.
  for (const RankInfo& r : run.ranks) {
    if (const std::string* mesh = metaText(r.meta, "mesh"); r.rank == c.rank && mesh) out << ", mesh " << printable(*mesh);
  }
  out << "\n";
  std::vector<std::string> finite_inputs;
  for (const TensorHealth& t : c.tensors) {
    bool output = isOutputRole(c.phase, t.role);
    const std::string role = roleName(t.role);
    bool bad = std::count(h.nonfinite_inputs.begin(), h.nonfinite_inputs.end(), role) ||
               std::count(h.nonfinite_outputs.begin(), h.nonfinite_outputs.end(), role);
    if (bad) {
      out << "  " << (output ? "output " : "input  ") << describeBad(t) << "\n";
    } else if (!output && t.role != Role::kMask) {
      finite_inputs.push_back(role);
    }
    if (t.masked_rows > 0) out << "  mask: " << maskedRowsText(c, t) << "\n";
  }
  if (!finite_inputs.empty()) {
    out << "  finite inputs " << joined(finite_inputs, " ") << " (largest |x| " << shortNumber(largestFiniteInput(c)) << ")\n";
    // Only worth a line when the inputs are large: then where they grew is the question.
    if (auto trail = inputTrail(run, *f.first); trail && f.origin == Origin::kAttention && trail->largest >= kLargeInput) {
      out << "    " << trailText(run, c, *trail) << "\n";
    }
  }
  if (!c.device.isCpu()) {
    const KernelsOfCall found = CallKernelIndex(run).of(c);
    std::vector<std::string> names;
    const KernelRecord* main = mainKernel(found.kernels);
    for (const KernelRecord& k : found.kernels) names.push_back(shortKernelName(k.name) + (&k == main ? " (main)" : ""));
    out << "  kernels on " << c.device.name() << ": " << (names.empty() ? found.attribution : joined(names, ", "));
    if (found.from == "inferred" || found.from == "replay") out << "\n    (" << found.attribution << ")";
    out << "\n";
  }
  if (const CaptureRecord* capture = run.captureOf(c.rank, c.seq)) {
    if (capture->path.empty()) out << "  not captured: " << capture->skipped << "\n";
    else out << "  captured: nanprov replay " << shellWord(run.capturePath(*capture)) << "\n";
  }
  if (f.origin == Origin::kUpstream && f.first_source) {
    out << "  first source edge inside attention came later: " << callName(run.calls[*f.first_source]) << "\n";
  }
  for (const replay::IssueMatch& m : report.source_issues.matches) out << "  known issue: " << printable(replay::matchText(m)) << "\n";
  for (const replay::IssueMatch& m : report.source_issues.possible) out << "  known issue: " << printable(replay::possibleText(m, "the store")) << "\n";
  out << "  after it: " << f.propagation.calls << " non-finite calls across " << f.propagation.layers
      << (f.propagation.layers == 1 ? " layer" : " layers") << " on " << f.propagation.ranks
      << (f.propagation.ranks == 1 ? " rank" : " ranks") << "\n";
  if (conclusion.sentinel) {
    out << "  gradients went non-finite at " << stepLabel(run, conclusion.sentinel->step) << ": "
        << listed(conclusion.sentinel->gradients) << "\n";
  }
  out << collectivePathsText(run, conclusion);
  return out.str() + closing(run, report);
}

}  // namespace nanprov
