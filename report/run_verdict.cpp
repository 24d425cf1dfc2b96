#include "report/run_verdict.h"

#include <algorithm>

#include "base/exit_codes.h"
#include "base/records/call_name.h"
#include "base/text.h"
#include "report/report_json.h"
#include "report/run_overview.h"

namespace nanprov::report {
namespace {

using nlohmann::json;

// Replay's root causes, by the class a job acts on. Those not named here leave it undetermined:
// none (nothing failed on replay, though the run's call did), cannot-judge, reference-suspect,
// captured-backend-suspect (the run's backend could not be rerun: kernel or device is not settled).
std::optional<VerdictClass> classOfCause(const std::string& cause) {
  if (cause == "backend-specific" || cause == "forward-ok-backward-wrong") return VerdictClass::kKernel;
  if (cause == "nondeterministic") return VerdictClass::kNondeterministicKernel;
  if (cause == "not-reproduced") return VerdictClass::kSuspectDevice;
  if (cause == "input-caused" || cause == "precision-limit" || cause == "fully-masked-rows")
    return VerdictClass::kDataOrModel;
  return std::nullopt;
}

const std::string* textField(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? &it->get_ref<const std::string&>() : nullptr;
}

std::string textOr(const json& j, const char* key) {
  const std::string* s = textField(j, key);
  return s ? *s : "";
}

DeviceIdentity deviceOfRank(const RunOverview& run, int rank) {
  for (const RankOverview& r : run.ranks) {
    if (r.rank == rank) return r.device;
  }
  return {};
}

void placeAtCall(RunVerdict& v, const EdgeCall& edge) {
  const CallRecord& c = edge.call;
  v.rank = c.rank;
  v.step = c.step;
  v.call = callName(c);
  v.phase = phaseName(c.phase);
  v.op = c.op;
  v.backend = c.backend;
  v.module = c.module;
  v.device = edge.device;
  v.injected = !c.injected.empty();
}

void placeAtFinding(RunVerdict& v, const RunOverview& run, const AuditFinding& f) {
  v.rank = f.rank;
  if (f.step >= 0) v.step = f.step;
  v.call = f.name;
  v.phase = f.phase;
  v.op = f.op;
  v.backend = f.backend;
  v.device = deviceOfRank(run, f.rank);
}

// The class from replay's answer for the call placed in `v`.
void judgeByReplay(RunVerdict& v, const ReplayAnswer& a) {
  v.replay = a;
  if (!a.injected.empty()) v.injected = true;
  if (a.cause.empty()) {
    v.cls = VerdictClass::kUndetermined;
    v.reason = "replay-failed";
    v.explanation = "replay of the capture gave no root cause: " + a.explanation;
    return;
  }
  v.reason = a.cause;
  std::optional<VerdictClass> cls = classOfCause(a.cause);
  // The device is suspected only on the evidence: on the run's kind of device, every rerun gave
  // one bitwise result and none the run's. Reruns that differ, or another kind of device, settle
  // nothing; an --inject fault is a drill, never a reason to exclude a node.
  if (cls == VerdictClass::kSuspectDevice) {
    const json& r = a.reruns;
    const bool identical = r.is_object() && r.value("runs", 0) > 0 && r.value("reproduced", -1) == 0 &&
                           r.value("distinct_results", 0) == 1;
    if (v.injected) {
      cls.reset();
      v.reason = "injected";
    } else if (!identical || !a.same_device_kind) {
      cls.reset();
    }
  }
  v.cls = cls.value_or(VerdictClass::kUndetermined);
  if (v.cls == VerdictClass::kSuspectDevice && v.rank) v.suspects.push_back({.rank = *v.rank, .device = v.device});
  std::string why;
  switch (v.cls) {
    case VerdictClass::kKernel: why = "a kernel fails this call every time it runs it"; break;
    case VerdictClass::kNondeterministicKernel:
      why = "the fault recurs in some reruns of the call, not all: a nondeterministic kernel";
      break;
    case VerdictClass::kSuspectDevice:
      why =
          "the run's result never recurs from its inputs while every rerun computes the same bits: suspect the device";
      break;
    case VerdictClass::kDataOrModel: why = "the data or the model made the non-finite values, not a kernel"; break;
    default:
      why = v.injected ? "the run's result never recurs from its inputs: it was injected by nanprov run --inject, a "
                         "drill, not a fault"
                       : "replay does not settle whether the kernel, the device or the data is at fault";
      break;
  }
  v.explanation = why + " (" + a.cause + (a.explanation.empty() ? "" : ": " + a.explanation) + ")";
}

json nullable(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

}  // namespace

const char* verdictClassName(VerdictClass c) {
  switch (c) {
    case VerdictClass::kNoFault: return "no_fault";
    case VerdictClass::kKernel: return "kernel";
    case VerdictClass::kNondeterministicKernel: return "nondeterministic_kernel";
    case VerdictClass::kSuspectDevice: return "suspect_device";
    case VerdictClass::kDataOrModel: return "data_or_model";
    case VerdictClass::kUndetermined: return "undetermined";
    case VerdictClass::kNothingChecked: return "nothing_checked";
  }
  return "?";
}

const char* verdictActionName(VerdictAction a) {
  switch (a) {
    case VerdictAction::kNone: return "none";
    case VerdictAction::kFixCode: return "fix_code";
    case VerdictAction::kRequeue: return "requeue";
    case VerdictAction::kExcludeNode: return "exclude_node";
    case VerdictAction::kInspect: return "inspect";
  }
  return "?";
}

int verdictExitCode(VerdictClass c) {
  switch (c) {
    case VerdictClass::kNoFault: return kClean;
    case VerdictClass::kKernel: return kKernelFault;
    case VerdictClass::kNondeterministicKernel: return kNondeterministicKernel;
    case VerdictClass::kSuspectDevice: return kSuspectDevice;
    case VerdictClass::kDataOrModel: return kDataOrModelFault;
    case VerdictClass::kUndetermined: return kUndetermined;
    case VerdictClass::kNothingChecked: return kNothingChecked;
  }
  return kUndetermined;
}

VerdictAction verdictAction(VerdictClass c) {
  switch (c) {
    case VerdictClass::kNoFault: return VerdictAction::kNone;
    case VerdictClass::kKernel:
    case VerdictClass::kDataOrModel: return VerdictAction::kFixCode;
    // It may well pass from the last checkpoint; the kernel still wants fixing, which the
    // explanation names.
    case VerdictClass::kNondeterministicKernel: return VerdictAction::kRequeue;
    case VerdictClass::kSuspectDevice: return VerdictAction::kExcludeNode;
    case VerdictClass::kUndetermined:
    case VerdictClass::kNothingChecked: return VerdictAction::kInspect;
  }
  return VerdictAction::kInspect;
}

std::optional<ReplayTarget> replayTargetOf(const Report& report) {
  const Conclusion& c = report.conclusion;
  if (c.outcome == Outcome::kAuditFinding && !report.first_edge) {
    const AuditFinding& f = c.audit.findings.front();
    if (f.capture.empty()) return ReplayTarget{.why = "the audit finding " + f.name + " has no capture"};
    return ReplayTarget{.capture = f.capture};
  }
  if (c.outcome != Outcome::kEdgeFound || c.sentinel_first || report.origin != Origin::kAttention ||
      !report.first_source_edge) {
    return std::nullopt;
  }
  const std::optional<EdgeCapture>& capture = report.first_source_edge->capture;
  const std::string name = callName(report.first_source_edge->call);
  if (!capture) return ReplayTarget{.why = name + " was not captured"};
  if (capture->path.empty()) return ReplayTarget{.why = name + " was not captured: " + capture->skipped};
  return ReplayTarget{.capture = capture->path};
}

ReplayAnswer replayAnswerOf(const json& doc) {
  if (!doc.is_object()) return replayFailed("its output was not a JSON object");
  auto cause = doc.find("root_cause");
  if (cause == doc.end() || !cause->is_object() || !textField(*cause, "class")) {
    return replayFailed("its JSON has no root_cause.class");
  }
  ReplayAnswer a{.cause = textOr(*cause, "class"),
                 .explanation = textOr(*cause, "explanation"),
                 .backend = textOr(*cause, "backend"),
                 .kernel = textOr(*cause, "kernel"),
                 .injected = textOr(doc, "injected")};
  if (auto reruns = doc.find("reruns"); reruns != doc.end()) a.reruns = *reruns;
  auto kind = [&](const char* key) {
    const std::string device = textOr(doc, key);
    return device.substr(0, device.find(':'));
  };
  a.same_device_kind = !kind("captured_on").empty() && kind("captured_on") == kind("replayed_on");
  return a;
}

ReplayAnswer replayFailed(const std::string& why) { return ReplayAnswer{.explanation = why}; }

RunVerdict verdictOf(const Report& report, const std::optional<ReplayAnswer>& replay) {
  const Conclusion& c = report.conclusion;
  RunVerdict v{.outcome = outcomeName(c.outcome)};
  switch (c.outcome) {
    case Outcome::kClean:
    case Outcome::kPartial:
      v.cls = VerdictClass::kNoFault;
      v.reason = v.outcome;
      v.explanation = c.outcome == Outcome::kClean
                          ? "every checked attention input and output was finite"
                          : "no fault in what was checked, but not everything was (nanprov report says what)";
      return v;
    case Outcome::kNothingChecked:
      v.cls = VerdictClass::kNothingChecked;
      v.reason = "nothing-checked";
      v.explanation = "no attention call was checked: " + c.nothing_checked_why;
      return v;
    case Outcome::kReplicaDivergence: {
      // Replicas of the same parameters came apart while every value stayed finite: the device
      // (or its memory) of the rank that went its own way. With two replicas either may be it.
      const ReplicaDivergence& d = *c.replicas.first_divergence;
      v.cls = VerdictClass::kSuspectDevice;
      v.reason = "replica-divergence";
      v.step = d.step;
      const std::string ranks = ranksText(d.ranks);
      for (int r : d.ranks) v.suspects.push_back({.rank = r, .device = deviceOfRank(report.run, r)});
      if (d.ranks.size() == 1 && d.by_majority) {
        v.rank = d.ranks.front();
        v.device = deviceOfRank(report.run, d.ranks.front());
        v.explanation = ranks + "'s parameters differ from its replicas' after step " + std::to_string(d.step) + ", " +
                        parameterText(d) + ", while every value stayed finite: suspect its device";
      } else {
        v.explanation = "the replicas on " + ranks + " hold different parameters after step " + std::to_string(d.step) +
                        ", " + parameterText(d) +
                        ", while every value stayed finite; no majority tells which is wrong: "
                        "suspect the devices of those ranks";
      }
      return v;
    }
    case Outcome::kUnattributed:
    case Outcome::kOutsideAttention:
    case Outcome::kEdgeFound:
    case Outcome::kAuditFinding: break;
  }
  // Where: the gradients when they went non-finite first, else the first edge (its source when
  // attention made the values), else the audit's first finding.
  if (c.sentinel_first && c.sentinel) {
    v.rank = c.sentinel->rank;
    v.step = c.sentinel->step;
    v.device = deviceOfRank(report.run, c.sentinel->rank);
  } else if (report.first_edge) {
    placeAtCall(v, report.origin == Origin::kAttention && report.first_source_edge ? *report.first_source_edge
                                                                                   : *report.first_edge);
  } else if (!c.audit.findings.empty()) {
    placeAtFinding(v, report.run, c.audit.findings.front());
  }
  if (c.outcome == Outcome::kUnattributed) {
    v.cls = VerdictClass::kUndetermined;
    v.reason = "unattributed";
    v.explanation = "values went non-finite where what made them was not checked (nanprov report names it)";
    if (const auto& lost = c.nonfinite_not_stored) {
      v.rank = lost->rank;
      v.step = lost->step;
      v.device = deviceOfRank(report.run, lost->rank);
      v.call = v.phase = v.op = v.backend = v.module = "";  // a later stored edge is not where it was
      v.reason = "rows-lost";
      v.explanation =
          "values went non-finite, but the rows of the calls that saw them never reached the store (killed, or the "
          "disk filled)";
    }
    return v;
  }
  if (c.outcome == Outcome::kOutsideAttention ||
      (c.outcome == Outcome::kEdgeFound && report.origin == Origin::kUpstream)) {
    v.cls = VerdictClass::kDataOrModel;
    v.reason = "outside-attention";
    v.explanation = c.sentinel_first
                        ? "the gradients went non-finite before any attention call met a non-finite value: the origin "
                          "is outside attention"
                        : "non-finite values reached attention from upstream: the origin is outside attention";
    return v;
  }
  const std::optional<ReplayTarget> target = replayTargetOf(report);
  if (!target || target->capture.empty()) {
    v.cls = VerdictClass::kUndetermined;
    v.reason = "not-captured";
    v.explanation = (target ? target->why : std::string("no capture to replay")) +
                    ": replay cannot say whether the kernel, the device or the data is at fault";
    return v;
  }
  v.capture = target->capture;
  judgeByReplay(v, replay.value_or(replayFailed("it was not run")));
  return v;
}

json verdictJson(const RunVerdict& v) {
  json root_cause = nullptr, reruns = nullptr;
  if (v.replay && !v.replay->cause.empty()) {
    root_cause = {{"class", v.replay->cause},
                  {"explanation", v.replay->explanation},
                  {"backend", nullable(v.replay->backend)},
                  {"kernel", nullable(v.replay->kernel)}};
    reruns = v.replay->reruns;
  }
  json suspects = json::array();
  for (const RunVerdict::Suspect& s : v.suspects)
    suspects.push_back({{"rank", s.rank}, {"device_identity", deviceIdentityJson(s.device)}});
  return {{"verdict", verdictClassName(v.cls)},
          {"exit_code", verdictExitCode(v.cls)},
          {"action", verdictActionName(verdictAction(v.cls))},
          {"reason", v.reason},
          {"explanation", v.explanation},
          {"outcome", v.outcome},
          {"rank", v.rank ? json(*v.rank) : json(nullptr)},
          {"step", v.step ? json(*v.step) : json(nullptr)},
          {"call", nullable(v.call)},
          {"phase", nullable(v.phase)},
          {"op", nullable(v.op)},
          {"backend", nullable(v.backend)},
          {"module", nullable(v.module)},
          {"device_identity", v.rank ? deviceIdentityJson(v.device) : json(nullptr)},
          {"suspects", suspects},
          {"injected", v.injected},
          {"capture", nullable(v.capture)},
          {"root_cause", root_cause},
          {"reruns", reruns}};
}

std::string verdictLine(const RunVerdict& v) {
  std::string out = std::string(verdictClassName(v.cls)) + " (exit " + std::to_string(verdictExitCode(v.cls)) + ", " +
                    verdictActionName(verdictAction(v.cls)) + ")";
  std::string where = v.call.empty() && v.rank ? "rank " + std::to_string(*v.rank) : v.call;
  if (where.empty() && v.suspects.size() > 1) {  // "rank 0 on host a, cuda:0 ..., rank 2 on host b, ..."
    std::vector<std::string> each;
    for (const RunVerdict::Suspect& s : v.suspects) {
      const std::string device = deviceIdentityText(s.device);
      each.push_back("rank " + std::to_string(s.rank) + (device.empty() ? "" : " on " + device));
    }
    where = joined(each, "; ");
  }
  if (v.step) where += (where.empty() ? "" : ", ") + std::string("step ") + std::to_string(*v.step);
  if (std::string device = deviceIdentityText(v.device); !device.empty()) where += ", on " + device;
  if (!where.empty()) out += ": " + where;
  return out + ": " + v.explanation;
}

}  // namespace nanprov::report
