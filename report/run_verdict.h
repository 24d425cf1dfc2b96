// The verdict a scheduler acts on (`nanprov verdict`, issue 64): the report's conclusion and, for a
// call attention made the first non-finite value in (or the audit found wrong), what replaying its
// capture said of the cause, as one class with one exit code (base/exit_codes.h) and one action
// for the job: requeue, exclude the node, or fix the code. Launchers and requeue scripts read the
// exit code or the one JSON object; people read the one line.
//
//   class                     exit  action        from
//   no_fault                  0     none          report clean or partial
//   kernel                    10    fix_code      replay: backend-specific, forward-ok-backward-wrong
//   nondeterministic_kernel   11    requeue       replay: nondeterministic (the fault recurs in k of N reruns)
//   suspect_device            12    exclude_node  replay: not-reproduced (never recurs, every rerun bitwise
//                                                 identical); report: replica_divergence (DDP replicas' parameters
//                                                 came apart, all finite; the rank, when a majority tells it)
//   data_or_model             13    fix_code      replay: input-caused, precision-limit, fully-masked-rows;
//                                                 report: the origin is outside attention
//   undetermined              14    inspect       report unattributed; no capture; replay none, cannot-judge,
//                                                 reference-suspect, captured-backend-suspect, or it failed
//   nothing_checked           4     inspect       report nothing checked
//
// Never a false attribution: where the evidence does not settle the class, it is undetermined and
// says why. No LibTorch: the replay engine's answer comes in as its JSON.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "base/records/device_identity.h"
#include "report/report.h"

namespace nanprov::report {

enum class VerdictClass {
  kNoFault,
  kKernel,
  kNondeterministicKernel,
  kSuspectDevice,
  kDataOrModel,
  kUndetermined,
  kNothingChecked
};
enum class VerdictAction { kNone, kFixCode, kRequeue, kExcludeNode, kInspect };

const char* verdictClassName(VerdictClass c);    // "no_fault", "kernel", ... as the JSON spells them
const char* verdictActionName(VerdictAction a);  // "none", "fix_code", "requeue", "exclude_node", "inspect"
int verdictExitCode(VerdictClass c);
VerdictAction verdictAction(VerdictClass c);

// The call whose capture the verdict needs replayed: the first source edge when attention made the
// first non-finite values, else the first audit finding of a run with no edge. None when the
// report settles the class alone (no fault, the origin outside attention, unattributed) or the
// call was not captured (`why` then says so).
struct ReplayTarget {
  std::string capture;  // the capture file; "" when there is none
  std::string why;      // why not, when capture is ""
};
std::optional<ReplayTarget> replayTargetOf(const Report& report);

// What replay said of the capture, from its --json (replay/replay_render.cpp), or why it said nothing.
struct ReplayAnswer {
  std::string cause;            // root_cause.class: "backend-specific", "not-reproduced", ...; "" when replay failed
  std::string explanation;      // root_cause.explanation, or why replay failed
  std::string backend, kernel;  // root_cause's, where named
  std::string injected;         // the role --inject corrupted in the run; "" when none
  nlohmann::json reruns;  // replay's `reruns` as it wrote them (runs, reproduced, devices, in_run); null when none
  // Replay's device kind was the run's (cuda and cuda, cpu and cpu): only then can its reruns
  // speak for the run's device.
  bool same_device_kind = false;
};
ReplayAnswer replayAnswerOf(const nlohmann::json& replay_json);
ReplayAnswer replayFailed(const std::string& why);

struct RunVerdict {
  VerdictClass cls = VerdictClass::kNoFault;
  // The word for what decided it: replay's root cause ("not-reproduced"), or the report's
  // ("outside-attention", "unattributed", "clean", "partial", "not-captured", "replay-failed",
  // "nothing-checked"), or "replica-divergence" (suspect_device, from the report alone).
  std::string reason;
  std::string explanation;  // one sentence, for people
  std::string outcome;      // the report's outcome ("edge", "clean", ...)
  // Where: the call (first source edge, the first edge from upstream, or the audit finding), or for
  // non-finite gradients found first, the rank and step alone (call "").
  std::optional<int> rank;
  std::optional<int64_t> step;
  std::string call, phase, op, backend, module;
  DeviceIdentity device;
  // The nodes a scheduler should exclude (suspect_device only): the rank whose result never
  // recurred, or every rank a replica divergence names (both of two replicas: either may be wrong).
  struct Suspect {
    int rank = 0;
    DeviceIdentity device;
  };
  std::vector<Suspect> suspects;
  bool injected = false;               // the fault was put there by nanprov run --inject
  std::optional<ReplayAnswer> replay;  // when a capture was replayed (or tried)
  std::string capture;                 // that capture
};

// `replay` is the answer for replayTargetOf(report)'s capture, when there was one to replay.
RunVerdict verdictOf(const Report& report, const std::optional<ReplayAnswer>& replay);

// {verdict, exit_code, action, reason, explanation, outcome, rank, step, call, phase, op, backend,
//  module, device_identity, suspects [{rank, device_identity}], injected, capture, root_cause
//  {class, explanation, backend, kernel}, reruns}: one object, null (suspects: []) for what does
//  not apply.
nlohmann::json verdictJson(const RunVerdict& v);
// "suspect_device (exit 12, exclude_node): rank0:layer0:call2, step 1, on host vm, cpu: ...".
std::string verdictLine(const RunVerdict& v);

}  // namespace nanprov::report
