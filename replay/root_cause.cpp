#include <algorithm>

#include "base/exit_codes.h"
#include "base/records/call_record.h"
#include "base/text.h"
#include "replay/replay_result.h"

namespace nanprov::replay {
namespace {

bool isGradient(const std::string& role) { return role == "dQ" || role == "dK" || role == "dV"; }

// Why a call replay did not rerun as the run made it cannot be judged, in the capture's words.
std::string cannotJudge(const ReplayResult& r) {
  return "the capture does not hold all of the call (" + r.incomplete +
         "), so replay cannot judge it; rerun with that part of the call captured";
}

std::string ofRuns(int k, int n) { return std::to_string(k) + " of " + std::to_string(n); }

// k of N reruns on the replay's own device gave the run's result: the captured backend's kernel
// is nondeterministic on this call. Whether the other backends are stable says whether the call
// or the kernel is.
bool sometimes(const DeviceReruns& d) { return d.reproduced > 0 && d.reproduced < d.runs; }

// Where the run's result recurred in only some reruns: replay's own, else the run's.
const DeviceReruns* unstable(const ReplayResult& r) {
  if (!r.reruns) return nullptr;
  if (!r.reruns->devices.empty() && sometimes(r.reruns->devices.front())) return &r.reruns->devices.front();
  if (r.reruns->in_run && sometimes(*r.reruns->in_run)) return &*r.reruns->in_run;
  return nullptr;
}

RootCause nondeterministic(const ReplayResult& r, const DeviceReruns& here) {
  const Reruns& reruns = *r.reruns;
  RootCause cause;
  cause.cls = CauseClass::kNondeterministic;
  cause.backend = reruns.backend.empty() ? r.backend : reruns.backend;
  cause.kernel = r.main_kernel;
  cause.tensors = r.captured ? r.captured->failing() : std::vector<std::string>{};
  cause.explanation = cause.backend + " gave the run's result in " + ofRuns(here.reproduced, here.runs) +
                      " reruns of the captured inputs on " + here.device + " (" + std::to_string(here.distinct) +
                      " bitwise-distinct results): a nondeterministic kernel";
  for (const BackendStability& b : reruns.others) {
    cause.explanation += "; " + b.name +
                         (b.distinct == 1 && b.failed == 0
                              ? " is stable on the same call (" + std::to_string(b.runs) + " reruns, one result)"
                              : " varies too (" + std::to_string(b.distinct) + " distinct results, " +
                                    ofRuns(b.failed, b.runs) + " failing)");
  }
  return cause;
}

// What the captured backend's reruns add to "not reproduced": whether they were bitwise
// identical (then the run's result cannot be recomputed from its inputs on this device).
// The reruns that never gave the run's result: replay's own, else the run's; nullptr when none ran.
const DeviceReruns* neverReproduced(const ReplayResult& r) {
  if (!r.reruns) return nullptr;
  if (!r.reruns->devices.empty() && r.reruns->devices.front().runs > 0) {
    const DeviceReruns& here = r.reruns->devices.front();
    return here.reproduced == 0 ? &here : nullptr;
  }
  if (r.reruns->in_run && r.reruns->in_run->runs > 0 && r.reruns->in_run->reproduced == 0) return &*r.reruns->in_run;
  return nullptr;
}

std::string runsDevice(const ReplayResult& r) {
  return r.environment.count("gpu") ? r.environment.at("gpu") : r.captured_on;
}

// Whether reruns ran on the kind of device the run used: the run's own reruns, or replay's on
// the CPU for a CPU run or on a GPU of the model the capture names.
bool onTheRunsDevice(const ReplayResult& r, const DeviceReruns& d) {
  if (r.reruns && r.reruns->in_run && &d == &*r.reruns->in_run) return true;
  if (r.captured_on == "cpu") return d.device == "cpu";
  const auto gpu = r.environment.find("gpu");
  return gpu != r.environment.end() && !gpu->second.empty() && d.device.find(gpu->second) != std::string::npos;
}

std::string rerunsNeverReproduced(const ReplayResult& r) {
  const DeviceReruns* never = neverReproduced(r);
  if (!never) return "";
  const DeviceReruns& here = *never;
  std::string text = "; " + (r.reruns->backend.empty() ? r.backend : r.reruns->backend) +
                     " never gave the run's result in " + std::to_string(here.runs) + " reruns on " + here.device;
  if (here.distinct == 1) {
    return text + ", each bitwise identical: the run's result cannot be recomputed from its inputs on this device";
  }
  return text + ", and the reruns differ in their bits (" + std::to_string(here.distinct) +
         " distinct results): a nondeterministic kernel that more reruns (--reruns) may catch";
}

}  // namespace

const Comparison* BackendRun::tensor(const std::string& role) const {
  for (const Comparison& c : tensors) {
    if (c.role == role) return &c;
  }
  return nullptr;
}

std::vector<std::string> BackendRun::failing() const {
  std::vector<std::string> roles;
  for (const Comparison& c : tensors) {
    if (isFailure(c.verdict)) roles.push_back(c.role);
  }
  return roles;
}

std::string BackendRun::mainKernel() const {
  for (const ReplayedKernel& k : kernels) {
    if (k.main) return k.short_name;
  }
  return "";
}

RootCause findRootCause(const ReplayResult& r) {
  RootCause cause;
  if (r.conditions.dropout_p > 0) {
    // Every backend replays the call without the run's random dropout mask: whatever they say,
    // it is about another call.
    cause.cls = CauseClass::kCannotJudge;
    cause.explanation = cannotJudge(r);
    return cause;
  }
  if (!r.reference_problem.empty()) {
    cause.cls = CauseClass::kInputCaused;
    cause.explanation = "the float64 reference itself is not finite here (" + r.reference_problem +
                        "): the inputs are at fault, not a kernel";
    return cause;
  }
  if (const DeviceReruns* here = unstable(r)) return nondeterministic(r, *here);
  std::vector<const BackendRun*> passing, failing;
  for (const BackendRun& b : r.backends) {
    if (!b.ran) continue;
    (b.failing().empty() ? passing : failing).push_back(&b);
  }
  if (failing.empty()) {
    std::vector<std::string> captured_bad = r.captured ? r.captured->failing() : std::vector<std::string>{};
    if (captured_bad.empty()) {
      cause.explanation =
          passing.empty() ? "no backend could run this call" : "every backend that ran agrees with the reference";
      return cause;
    }
    cause.cls = CauseClass::kNotReproduced;
    cause.tensors = captured_bad;
    cause.backend = r.backend;
    cause.explanation = "the run's " + joined(captured_bad) +
                        " failed, but every backend computes this call correctly from " + "the captured inputs: ";
    bool captured_rerun =
        std::any_of(r.backends.begin(), r.backends.end(), [](const BackendRun& b) { return b.original && b.ran; });
    if (!r.injected.empty()) {
      cause.explanation += r.injected + " was corrupted by nanprov run --inject, so the kernel itself is fine" +
                           rerunsNeverReproduced(r);
    } else if (!r.incomplete.empty()) {
      // Not "not reproduced": replay did not rerun the call the run made (a compiled score_mod, a
      // softcap), so it can neither confirm nor clear the kernel.
      cause.cls = CauseClass::kCannotJudge;
      cause.explanation += cannotJudge(r);
    } else if (!captured_rerun && !passing.empty() && r.reruns && r.reruns->in_run &&
               r.reruns->in_run->reproduced == r.reruns->in_run->runs && r.reruns->in_run->runs > 0) {
      // Replay cannot run it, but the run's process reran it and it failed every time, while
      // every backend replay ran computes the call right: the captured backend is at fault.
      cause.cls = CauseClass::kBackendSpecific;
      std::vector<std::string> ok_names;
      for (const BackendRun* b : passing) ok_names.push_back(b->name);
      cause.explanation = r.backend + " gets " + joined(captured_bad) +
                          " wrong every time: the run's process reran it " + std::to_string(r.reruns->in_run->runs) +
                          " times on " + r.reruns->in_run->device + ", while " + joined(ok_names) +
                          " and the float64 reference compute the call correctly";
    } else if (!captured_rerun && !passing.empty() && !neverReproduced(r)) {
      // Replay never ran what the run ran (FlashAttention 2/3/4, a module's own code): every
      // backend that could run gets the call right from the same inputs, so it is the suspect.
      cause.cls = CauseClass::kCapturedBackendSuspect;
      std::vector<std::string> ok_names;
      for (const BackendRun* b : passing) ok_names.push_back(b->name);
      std::string why;  // why the captured backend did not run, when replay tried it
      for (const BackendRun& b : r.backends) {
        if (b.original && !b.ran && !b.detail.empty()) why = " (" + b.detail + ")";
      }
      cause.explanation = r.backend + " got " + joined(captured_bad) + " wrong in the run, while " + joined(ok_names) +
                          " and the float64 reference compute the call correctly from the captured inputs; replay "
                          "cannot rerun " +
                          r.backend + " here" + why + ", so " + r.backend + " is the suspect";
    } else if (const DeviceReruns* never = neverReproduced(r);
               never && never->distinct == 1 && onTheRunsDevice(r, *never)) {
      // Every rerun computed the same bits on the run's kind of device, none the run's: the run's
      // result came from something the inputs do not hold.
      cause.explanation += "suspect the device it ran on (" + runsDevice(r) +
                           ") or the run's context (a race, memory corruption)" + rerunsNeverReproduced(r);
    } else if (never && never->distinct == 1) {
      // Identical reruns, but on another kind of device than the run's: they cannot tell a
      // faulty device from a kernel that differs between the two.
      cause.explanation += "replayed on another kind of device than the run's (" + runsDevice(r) +
                           "): replay it where it ran to tell the device from the kernel" + rerunsNeverReproduced(r);
    } else {
      cause.explanation +=
          "the failure is nondeterministic, or needs context the capture does not hold" + rerunsNeverReproduced(r);
    }
    return cause;
  }
  if (!passing.empty()) {
    // Confirmed by a backend that gets the same call right: name the original if it is among
    // the failing, else the first.
    const BackendRun* culprit = failing.front();
    for (const BackendRun* b : failing) {
      if (b->original) culprit = b;
    }
    cause.cls = CauseClass::kBackendSpecific;
    cause.backend = culprit->name;
    cause.tensors = culprit->failing();
    if (culprit->name == "plain_softmax" && r.conditions.fully_masked_rows > 0) {
      // pytorch#41508: not a kernel fault but a mask that leaves rows with no key to attend to,
      // which a plain softmax turns into 0/0.
      cause.cls = CauseClass::kFullyMaskedRows;
      cause.explanation = std::to_string(r.conditions.fully_masked_rows) + " " + kMaskedRowsUnit +
                          ": a plain softmax (what " + r.op +
                          " ran) gives NaN there, where SDPA's safe softmax and the float64 reference give 0. The mask "
                          "is the cause (pytorch#41508): unmask one key per row, or " +
                          (r.op == "multi_head_attention_forward"
                               ? std::string("call nn.MultiheadAttention with need_weights=False (SDPA)")
                               : std::string("compute the attention with SDPA"));
      return cause;
    }
    std::vector<std::string> ok_names;
    for (const BackendRun* b : passing) ok_names.push_back(b->name);
    const Comparison* o = culprit->tensor("O");
    if (culprit->name == "plain_softmax" && o && o->verdict == Verdict::kNonFinite &&
        (r.dtype == "float16" || r.dtype == "bfloat16")) {
      // Scores made by a matmul in the input's half precision overflow it, where SDPA's kernels
      // keep them in float32: not a kernel fault, the precision the code chose (diffusers' float16
      // baddbmm, the SD-2 story).
      cause.cls = CauseClass::kPrecisionLimit;
      cause.explanation =
          "the scores overflow " + r.dtype + " where the call computes them in plain ops (" + r.op + "), while " +
          joined(ok_names) +
          " (which keep the scores in float32) and the float64 "
          "reference stay finite: compute the scores in float32 (diffusers: upcast_attention) or call SDPA";
      return cause;
    }
    cause.kernel = culprit->original && !r.main_kernel.empty() ? r.main_kernel : culprit->mainKernel();
    cause.explanation = culprit->name + " gets " + joined(cause.tensors) + (cause.tensors.size() == 1 ? " only" : "") +
                        " wrong; " + joined(ok_names) + " compute the same call correctly";
    return cause;
  }
  // Every backend that ran fails. Alike with the yardstick: the input's precision cannot hold
  // this computation. Otherwise the reference's semantics are the suspect.
  std::vector<std::string> common;  // what every failing backend gets wrong
  for (const std::string& role : failing.front()->failing()) {
    bool everywhere = std::all_of(failing.begin(), failing.end(), [&](const BackendRun* b) {
      std::vector<std::string> f = b->failing();
      return std::count(f.begin(), f.end(), role) > 0;
    });
    if (everywhere) common.push_back(role);
  }
  if (common.empty()) common = failing.front()->failing();
  cause.tensors = common;
  bool yardstick_fails = std::any_of(common.begin(), common.end(), [&](const std::string& role) {
    return std::count(r.yardstick_nonfinite.begin(), r.yardstick_nonfinite.end(), role) > 0;
  });
  if (yardstick_fails) {
    cause.cls = CauseClass::kPrecisionLimit;
    cause.explanation = "every backend fails alike in " + r.dtype + ", as does the reordered " + r.dtype +
                        " yardstick, while the float64 reference is finite: the values overflow " + r.dtype;
  } else if (std::all_of(common.begin(), common.end(), isGradient)) {
    cause.cls = CauseClass::kForwardOkBackwardWrong;
    cause.explanation = "every backend's forward agrees with the reference; its " + joined(common) + " do not";
  } else {
    cause.cls = CauseClass::kReferenceSuspect;
    cause.explanation =
        "every backend disagrees with the reference alike while the yardstick agrees: check the "
        "captured semantics (mask alignment, scale, GQA mapping)";
  }
  return cause;
}

const char* causeName(CauseClass c) {
  switch (c) {
    case CauseClass::kNone: return "none";
    case CauseClass::kBackendSpecific: return "backend-specific";
    case CauseClass::kForwardOkBackwardWrong: return "forward-ok-backward-wrong";
    case CauseClass::kInputCaused: return "input-caused";
    case CauseClass::kPrecisionLimit: return "precision-limit";
    case CauseClass::kNotReproduced: return "not-reproduced";
    case CauseClass::kReferenceSuspect: return "reference-suspect";
    case CauseClass::kCapturedBackendSuspect: return "captured-backend-suspect";
    case CauseClass::kFullyMaskedRows: return "fully-masked-rows";
    case CauseClass::kCannotJudge: return "cannot-judge";
    case CauseClass::kNondeterministic: return "nondeterministic";
  }
  return "?";
}

int exitCodeOf(const RootCause& cause) {
  const bool recurred = cause.cls != CauseClass::kNone && cause.cls != CauseClass::kNotReproduced &&
                        cause.cls != CauseClass::kCannotJudge;
  return recurred ? kEdgeFound : kClean;
}

}  // namespace nanprov::replay
