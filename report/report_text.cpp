#include "report/report_text.h"

#include <algorithm>
#include <sstream>

#include "base/records/roles.h"
#include "base/text.h"
#include "report/terminal_text.h"

namespace nanprov::report {
namespace {

// Inputs above this are unusual for attention in any dtype: the text then says where they came from.
constexpr double kLargeInput = 1e4;

// "O: 4096 NaN of 4096" / "Q: 12 +Inf, 3 -Inf of 8192"
std::string describeBad(const TensorHealth& t) {
  std::vector<std::string> parts;
  if (t.nan) parts.push_back(std::to_string(t.nan) + " NaN");
  if (t.posinf) parts.push_back(std::to_string(t.posinf) + " +Inf");
  if (t.neginf) parts.push_back(std::to_string(t.neginf) + " -Inf");
  return std::string(roleName(t.role)) + ": " + joined(parts, ", ") + " of " + std::to_string(t.numel);
}

// "attention not checked: flex_attention x12, ..." and, on a line of its own, the one
// --probe-module that would check them; empty when nothing went unchecked.
std::string unprobedLines(const RunOverview& run) {
  std::vector<std::string> parts;
  for (const UncheckedAttention& u : run.unchecked) parts.push_back(u.kind + " x" + std::to_string(u.count));
  if (parts.empty()) return "";
  const std::string suggestion = suggestionText(run.suggested_probe_modules);
  return "  attention not checked: " + joined(parts, ", ") + "\n" +
         (suggestion.empty() ? "" : "    " + suggestion + "\n");
}

// Lines for the ranks not read, and for a job read from several directories; "" when neither.
std::string ranksNotReadText(const RunOverview& run) {
  std::string out;
  std::vector<std::string> unrecorded, absent;
  const std::vector<int>& missing = run.missing_ranks;
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
           std::to_string(run.world_size) + (absent.size() == 1 ? " has" : " have") +
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

// The first few names, then how many more: the whole model's parameters go NaN after a step.
std::string listed(const std::vector<std::string>& names) {
  constexpr size_t kShown = 5;
  if (names.empty()) return "-";
  if (names.size() <= kShown) return joined(names, ", ");
  std::vector<std::string> first(names.begin(), names.begin() + kShown);
  return joined(first, ", ") + " and " + std::to_string(names.size() - kShown) + " more";
}

// One line per rank that received non-finite values through a collective.
std::string collectivePathsText(const RunOverview& run, const Conclusion& c) {
  std::string out;
  for (const CollectivePath& p : c.collective_paths) {
    out += "  " + collectivePathText(p, run.step_unit, listed(p.parameters)) + "\n";
  }
  return out;
}

std::string trailText(StepUnit unit, const CallRecord& c, const InputTrail& t) {
  std::string here = c.module.empty() ? "this call" : c.module;
  if (!t.previous) {
    std::string each = unit == StepUnit::kForwardPass ? "forward pass" : "step";
    return "it is the " + each +
           "'s first attention call: the large inputs came with the batch or from the modules in or before " + here;
  }
  std::string before = t.previous->module.empty() ? callName(*t.previous) : t.previous->module;
  return "the attention call before it, " + callName(*t.previous) + " (" + before + "), had inputs up to " +
         shortNumber(t.previous_largest) + ": they grew between " + before + " and " + here;
}

// The replicas' comparison, where there were replicas to compare or sharded parameters that were
// not: a run of one process says nothing of it.
std::string replicasText(const RunOverview& run, const ReplicaCheck& r) {
  const std::string line = replicaCheckText(r, run.step_unit);
  return line.empty() ? "" : "  replicas: " + line + "\n";
}

// The headline of a run whose replicas diverged while every value stayed finite.
std::string replicaDivergenceText(const RunOverview& run, const ReplicaDivergence& d) {
  const std::string at = stepLabel(run.step_unit, d.step);
  if (d.ranks.size() == 1 && d.by_majority) {
    const std::string rank = ranksText(d.ranks);
    return "replicas diverged at " + at + ": " + rank + "'s parameters differ from its replicas', " + parameterText(d) +
           "; every value stayed finite: suspect " + rank + "'s device\n";
  }
  return "replicas diverged at " + at + ": " + ranksText(d.ranks) + " hold different parameters, " + parameterText(d) +
         "; every value stayed finite, and no majority tells which rank is wrong: suspect the devices of " +
         ranksText(d.ranks) + "\n";
}

// Every report ends alike: the audit's findings and totals (when it ran), the replicas compared,
// the trend warnings, the attention that was not checked, and the run's size.
std::string closing(const Report& report) {
  return auditText(report.conclusion.audit) + replicasText(report.run, report.conclusion.replicas) +
         trendsText(report.trends) + unprobedLines(report.run) + ranksNotReadText(report.run) + "  " +
         summaryLine(report.run) + "\n";
}

// The attention that ran unchecked by then, for the headline's second line: named here only when
// it is not all of what the closing lists (with its counts and the --probe-module) anyway.
std::string uncheckedByThenText(const RunOverview& run, const std::vector<std::string>& kinds) {
  std::vector<std::string> listed;
  for (const UncheckedAttention& u : run.unchecked) listed.push_back(u.kind);
  if (kinds.size() > 1 && kinds == listed) return "every kind listed under 'attention not checked' below";
  return joined(kinds, "; ");
}

// The kernels of an edge that ran on a GPU, the main one marked, and where they are known from
// when it was not CUPTI in the run.
std::string kernelsText(const EdgeCall& edge) {
  const KernelsOfCall& found = edge.kernels;
  std::vector<std::string> names;
  const KernelRecord* main = mainKernel(found.kernels);
  for (const KernelRecord& k : found.kernels) names.push_back(shortKernelName(k.name) + (&k == main ? " (main)" : ""));
  std::string out =
      "  kernels on " + edge.call.device.name() + ": " + (names.empty() ? found.attribution : joined(names, ", "));
  if (found.from == "inferred" || found.from == "replay") out += "\n    (" + found.attribution + ")";
  return out + "\n";
}

// The headline's start when the gradients went non-finite before any attention edge: where the
// values first went bad, as the checks found it. --trail checks every module's forward: when its
// first non-finite module output came in the forward by the sentinel's step, the values went bad
// there, and the gradients only followed. Without the trail nothing outside attention was checked
// in the forward, so the gradients are only the first values found.
std::string firstNonFiniteText(const Report& report) {
  const RunOverview& run = report.run;
  const SentinelFinding& s = *report.conclusion.sentinel;
  const std::optional<FirstModule>& m = report.first_module;
  if (m && m->check.phase == Phase::kForward && m->check.step <= s.step) {
    return "rank" + std::to_string(m->check.rank) + ":" + stepLabel(run.step_unit, m->check.step) +
           "  first non-finite values were in the forward, at " + stepLabel(run.step_unit, m->check.step);
  }
  return "rank" + std::to_string(s.rank) + ":" + stepLabel(run.step_unit, s.step) + "  first non-finite values " +
         (run.trail_on ? "were" : "found were") + " gradients, at " + stepLabel(run.step_unit, s.step);
}

// The headline and what follows it when the gradients went non-finite before any attention edge.
std::string sentinelFirstText(const Report& report) {
  const RunOverview& run = report.run;
  const Conclusion& conclusion = report.conclusion;
  const SentinelFinding& s = *conclusion.sentinel;
  std::ostringstream out;
  out << firstNonFiniteText(report);
  if (receivedThroughCollective(conclusion.collective_paths).count({s.rank, s.step})) {
    // Every rank's came through a collective: never "outside attention" for what arrived.
    out << ", and they reached this rank through a collective\n";
  } else if (conclusion.made_in_unchecked_attention) {
    // The trail's answer joined to what ran unchecked: inside that attention, its kernel unknown.
    out << ": " << madeInUncheckedAttentionText(*report.first_module, run.step_unit) << "\n";
  } else if (conclusion.outcome == Outcome::kOutsideAttention) {
    out << ": no probed attention call made them; the origin is outside attention\n";
  } else if (run.calls == 0 && conclusion.unchecked_by_sentinel_step.empty()) {
    // Nothing checked proves nothing: the model's attention may be of a kind nanprov did not see.
    out << ", but no attention call was checked, so nanprov cannot tell whether attention made them\n"
        << "  " << kUnseenAttentionHint << "\n";
  } else {
    // Never "outside attention" while attention ran unchecked: it may have made them.
    out << ", but attention ran unchecked by then, so nanprov cannot tell whether attention made them\n"
        << "  unchecked: " << uncheckedByThenText(run, conclusion.unchecked_by_sentinel_step) << "\n";
  }
  if (report.first_module && !conclusion.made_in_unchecked_attention) {
    out << "  the first non-finite value was " << firstModuleText(*report.first_module, run.step_unit, true) << "\n";
  } else if (!run.trail_on) {
    out << "  nanprov run --trail names the module that made them\n";
  }
  out << "  non-finite gradients: " << listed(s.gradients) << "\n";
  out << "  non-finite parameters after the update: " << listed(s.values) << "\n";
  out << collectivePathsText(run, conclusion);
  if (report.first_edge) {
    const CallRecord& c = report.first_edge->call;
    out << "  attention first saw non-finite values later: " << callName(c) << " (" << stepLabel(run.step_unit, c.step)
        << ", " << (report.origin == Origin::kAttention ? "source" : "propagated") << ")\n";
  } else {
    out << (run.calls == 0 ? "  no attention call was checked\n" : "  every checked attention call was finite\n");
  }
  return out.str();
}

// The headline and what follows it when attention met the first non-finite values.
std::string edgeText(const Report& report) {
  const RunOverview& run = report.run;
  const Conclusion& conclusion = report.conclusion;
  const EdgeCall& edge = *report.first_edge;
  const CallRecord& c = edge.call;
  const CallHealth& h = edge.health;
  std::ostringstream out;
  std::string inj = c.injected.empty() ? "" : "  [injected " + c.injected + " by --inject]";
  if (report.origin == Origin::kAttention) {
    out << callName(c) << "  first non-finite edge: finite inputs, non-finite " << joined(h.nonfinite_outputs, ", ")
        << inj << "\n";
  } else if (conclusion.made_in_unchecked_attention) {
    out << callName(c) << "  non-finite " << joined(h.nonfinite_inputs, ", ")
        << " reached attention from upstream: " << madeInUncheckedAttentionText(*report.first_module, run.step_unit)
        << inj << "\n";
  } else if (conclusion.outcome == Outcome::kUnattributed) {
    // Never "outside attention" while attention ran unchecked before it: it may have made them.
    out << callName(c) << "  non-finite " << joined(h.nonfinite_inputs, ", ")
        << " reached attention from upstream, but attention ran unchecked by then, so nanprov cannot tell whether "
           "attention made them"
        << inj << "\n"
        << "  unchecked: " << uncheckedByThenText(run, conclusion.unchecked_by_edge_step) << "\n";
  } else {
    out << callName(c) << "  non-finite " << joined(h.nonfinite_inputs, ", ")
        << " reached attention from upstream: " << upstreamOriginText(run, report.first_module, c) << inj << "\n";
  }
  out << "  " << stepLabel(run.step_unit, c.step) << ", " << phaseName(c.phase)
      << (c.recompute ? " (checkpoint recompute)" : "") << ", " << c.op << " (" << c.backend << ")";
  if (!c.module.empty()) out << ", module " << c.module;
  // Where a DeviceMesh placed the rank (dp, tp, pp...): which replica or shard made the NaN.
  if (!edge.mesh.empty()) out << ", mesh " << edge.mesh;
  out << "\n";
  // Which node and GPU, so that "this node" can be acted on (excluded, drained, its GPU swapped).
  if (std::string device = deviceIdentityText(edge.device); !device.empty()) out << "  on " << device << "\n";
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
    out << "  finite inputs " << joined(finite_inputs, " ") << " (largest |x| "
        << shortNumber(edge.largest_finite_input) << ")\n";
    // Only worth a line when the inputs are large: then where they grew is the question.
    if (const auto& trail = report.input_trail; trail && trail->largest >= kLargeInput) {
      out << "    " << trailText(run.step_unit, c, *trail) << "\n";
    }
  }
  if (!c.device.isCpu()) out << kernelsText(edge);
  if (edge.capture) {
    if (edge.capture->path.empty()) out << "  not captured: " << edge.capture->skipped << "\n";
    else out << "  captured: nanprov replay " << shellWord(edge.capture->path) << "\n";
  }
  if (report.origin == Origin::kUpstream && report.first_source_edge) {
    const EdgeCall& source = *report.first_source_edge;
    out << "  first source edge inside attention came later: " << callName(source.call);
    // Its node only when it is not the first edge's: a rank on another host or GPU.
    if (std::string device = deviceIdentityText(source.device); device != deviceIdentityText(edge.device))
      out << ", on " << device;
    out << "\n";
  }
  for (const IssueMatchNote& m : report.source_issues.matches)
    out << "  known issue: " << printable(m.sentence) << "\n";
  for (const PossibleIssueNote& m : report.source_issues.possible)
    out << "  known issue: " << printable(m.sentence) << "\n";
  const Propagation& p = report.propagation;
  out << "  after it: " << p.calls << " non-finite calls across " << p.layers << (p.layers == 1 ? " layer" : " layers")
      << " on " << p.ranks << (p.ranks == 1 ? " rank" : " ranks") << "\n";
  if (conclusion.sentinel) {
    out << "  gradients went non-finite at " << stepLabel(run.step_unit, conclusion.sentinel->step) << ": "
        << listed(conclusion.sentinel->gradients) << "\n";
  }
  out << collectivePathsText(run, conclusion);
  return out.str();
}

}  // namespace

std::string maskedRowsText(const CallRecord& call, const TensorHealth& mask) {
  if (auto rows = maskedQueryRows(call, mask)) return std::to_string(*rows) + " " + kMaskedRowsUnit;
  return std::to_string(mask.masked_rows) + " rows of the mask " + mask.shape.text() + " have every key masked";
}

std::string summaryLine(const RunOverview& run) {
  std::ostringstream out;
  bool passes = run.step_unit == StepUnit::kForwardPass;
  out << "run " << printable(run.dir) << ": " << run.ranksRan() << (run.ranksRan() == 1 ? " rank, " : " ranks, ")
      << run.calls << " attention calls checked, " << (passes ? run.steps + 1 : run.steps)
      << (passes ? " forward passes" : " optimizer steps");
  // The tally outlives the process; the store keeps only what the writer committed.
  if (int64_t lost = run.calls_not_stored; lost && !run.incomplete.empty()) {
    out << "\n  " << lost << (lost == 1 ? " call was" : " calls were")
        << " checked and not stored: writes to the store failed";
  } else if (lost) {
    out << "\n  the last " << lost << (lost == 1 ? " call was" : " calls were")
        << " not stored: the process ended before they reached the store (killed, or it exited "
           "by a path that runs no exit hook)";
  }
  for (const std::string& incomplete : run.incomplete) out << "\n  " << printable(incomplete);
  if (std::string summarised = summarisedText(run.summarised); !summarised.empty())
    out << "\n  summarised: " << summarised;
  for (const std::string& damage : run.damage) out << "\n  damaged: " << printable(damage);
  return out.str();
}

std::string summarisedText(const Summarised& s) {
  if (!s.calls) return "";
  const std::string which =
      s.not_clean ? " calls (" + std::to_string(s.not_clean) + " of them not clean)" : " clean calls";
  return std::to_string(s.calls) + which + " of steps " + std::to_string(s.first_step) + "-" +
         std::to_string(s.last_step) + " kept only as counts and max |x| per (step, layer, phase)" +
         (s.every > 1 ? ", up to " + std::to_string(s.every) + " steps a row" : std::string()) +
         " (nanprov run --store-budget); " +
         (s.not_clean ? "the first steps that were not clean are kept in full"
                      : "every call that was not clean is kept in full");
}

std::string reportText(const Report& stored) {
  // Rendered from a copy whose texts are safe to print.
  const Report report = forTerminal(stored);
  const RunOverview& run = report.run;
  const Conclusion& conclusion = report.conclusion;
  if (conclusion.outcome == Outcome::kNothingChecked) {
    return "nothing checked: no attention call was probed, so nanprov cannot call this run clean\n  why: " +
           printable(conclusion.nothing_checked_why) + "\n" + closing(report);
  }
  if (const auto& lost = conclusion.nonfinite_not_stored) {
    const bool going = run.run_file_readable && !run.exit_code && !run.signal;
    const std::string why = !run.incomplete.empty() ? "its rows were lost: writes to the store failed"
                            : going ? "its rows are not stored yet: the run is still going; ask again in a moment"
                                    : "its rows were lost: the process ended before they were written";
    return "values went non-finite at " + stepLabel(run.step_unit, lost->step) + " on rank " +
           std::to_string(lost->rank) +
           ", but the calls that saw them never reached the store, so nanprov cannot tell where they were made\n"
           "  the rank's call tally kept the step; " +
           why + "\n" + closing(report);
  }
  if (conclusion.sentinel_first) return sentinelFirstText(report) + closing(report);
  if (conclusion.outcome == Outcome::kReplicaDivergence) {
    return replicaDivergenceText(run, *conclusion.replicas.first_divergence) + closing(report);
  }
  if (!report.first_edge && conclusion.outcome == Outcome::kAuditFinding) {
    const AuditFinding& first = conclusion.audit.findings.front();
    return first.name + "  audit finding: finite outputs that are " + first.verdict.value_or("?") +
           " against the float64 reference (no value was non-finite)\n" + closing(report);
  }
  if (!report.first_edge) {
    std::string out =
        conclusion.outcome == Outcome::kPartial ? "no fault in what was checked, but not everything was: " : "clean: ";
    out += "every checked attention input and output was finite";
    // Inference runs have no optimizer steps, and so no gradients to vouch for.
    bool training = run.step_unit == StepUnit::kOptimizerStep;
    out += conclusion.sentinel || !training ? "\n" : ", and so were the gradients at every optimizer step\n";
    if (const AuditCoverage& cov = conclusion.audit.coverage; cov.regimes_judged < cov.regimes_seen) {
      out += "  the audit judged " + std::to_string(cov.regimes_judged) + " of the " +
             std::to_string(cov.regimes_seen) +
             " regimes of conditions its calls ran in: those not judged are listed below\n";
    }
    return out + closing(report);
  }
  return edgeText(report) + closing(report);
}

}  // namespace nanprov::report
