// What one replay found: per backend and tensor, the comparison with the float64 reference; the
// conditions in the captured data that known kernel bugs depend on; and the root cause for the
// call. Plain data, rendered as text for people and JSON for scripts (replay_render.cpp).
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "replay/verdict.h"

namespace nanprov::replay {

// A kernel a backend launched when replay ran it, as CUPTI traced it (CUDA only).
struct ReplayedKernel {
  std::string name;        // demangled
  std::string short_name;  // without template arguments and parameters
  int64_t duration_ns = 0;
  bool main = false;  // the longest: the attention kernel itself
};

struct BackendRun {
  std::string name;  // cudnn, flash, efficient, math, flash_cpu; "captured" for the run's own outputs
  bool ran = false;  // false: unsupported (or not replayable), `detail` says why
  std::string detail;
  bool original = false;                // the backend that ran the captured call
  std::vector<Comparison> tensors;      // O, LSE, dQ, dK, dV as far as produced
  std::vector<ReplayedKernel> kernels;  // of the captured phase's attention op, in launch order

  std::string mainKernel() const;  // short name; empty when none was traced

  const Comparison* tensor(const std::string& role) const;
  std::vector<std::string> failing() const;  // roles whose verdict is a failure
};

// The captured backend rerun on the call, N times, on one device (nanprov replay --reruns).
struct DeviceReruns {
  std::string device;  // "cpu", "cuda:0 (NVIDIA H100 80GB HBM3 (sm_90))"
  int runs = 0;
  int reproduced = 0;        // reruns that gave the run's result: the same roles failing with the same verdicts
  int identical_to_run = 0;  // reruns bitwise identical to the run's own outputs
  int distinct = 0;          // bitwise-distinct results among the reruns
};

// Another backend rerun as often, to say whether the call itself is unstable or only the
// captured backend: asked only when the captured backend's reruns disagreed.
struct BackendStability {
  std::string name;
  int runs = 0;
  int failed = 0;    // reruns with a failing verdict
  int distinct = 0;  // bitwise-distinct results
};

// Whether the run's result recurs when the captured backend reruns the captured inputs: every time
// (a deterministic fault), k of N (a nondeterministic kernel), or never while every rerun is
// bitwise identical (the run's result cannot be recomputed from its inputs on this device).
struct Reruns {
  std::string backend;
  std::string not_rerun;              // why the captured backend was not rerun; empty when it was
  std::vector<DeviceReruns> devices;  // the replay's device first, then any other of the same model
  std::vector<BackendStability> others;
  // The training process's own reruns of the call when it captured it (nanprov run --reruns): on
  // the device and in the state of the failure, and the only ones of an op replay cannot run.
  std::optional<DeviceReruns> in_run;
  std::string in_run_not_rerun;  // why the run did not rerun it, where it said

  int runs() const;
  int reproduced() const;
  bool everyRerunIdentical() const;  // on each device, one bitwise result
  // Every rerun on one device gave the run's result and none on another.
  bool dependsOnDevice() const;
};

// How a tensor sits in memory: what kernels see besides its values. Unset: not recorded.
struct TensorLayout {
  std::optional<std::vector<int64_t>> strides;
  std::optional<int64_t> storage_offset;  // in elements
  std::optional<int64_t> alignment;       // bytes: the largest power of two dividing the data pointer, at most 256
};

// One captured tensor's layout in the run and as replay rebuilt it.
struct LayoutReport {
  std::string role;
  TensorLayout recorded, replayed;
  std::string note;  // empty: rebuilt as recorded; else what differs and why
  bool faithful() const { return note.empty(); }
};

// What the captured data looks like, in the terms known bugs are described in (seed 004:
// cuDNN backward NaN in dQ when s_kv % 128 != 0 and a row's LSE is below about -88.7).
struct Conditions {
  int64_t fully_masked_rows = 0;      // query rows no key is visible to (mask, causal)
  std::optional<double> min_row_lse;  // smallest finite row LSE of the reference
  bool lse_below_limit = false;       // min_row_lse < -88.7: exp(-LSE) overflows float32
  int64_t s_q = 0, s_kv = 0, head_dim = 0, q_heads = 0, kv_heads = 0;
  bool causal = false;
  std::string window = "none";
  std::string query_dtype, mask_dtype;  // mask_dtype empty: no mask
  double dropout_p = 0;
  bool dropout_recorded = false;  // the capture said dropout_p; otherwise dropout_p's 0 is a default
};
inline constexpr double kLseLimit = -88.7;  // log of float32's smallest normal, about e^-87.3

// The root cause classes of DESIGN.md, plus three of nanprov's own: captured-backend-suspect (the
// run's backend could not be rerun; every other one is right), fully-masked-rows (a plain softmax
// over rows with every key masked) and cannot-judge (the capture lacks part of the call, e.g. a
// compiled score_mod); and nondeterministic (the run's result recurred in only some reruns).
enum class CauseClass {
  kNone,
  kBackendSpecific,
  kForwardOkBackwardWrong,
  kInputCaused,
  kPrecisionLimit,
  kNotReproduced,
  kReferenceSuspect,
  kCapturedBackendSuspect,
  kFullyMaskedRows,
  kCannotJudge,
  kNondeterministic,
};
const char* causeName(CauseClass c);  // "none", "backend-specific", ... as the JSON spells them

struct RootCause {
  CauseClass cls = CauseClass::kNone;
  std::string backend, kernel;
  std::vector<std::string> tensors;
  std::string explanation;
};

struct ReplayResult {
  std::string capture;  // path
  std::string call, phase, op, backend, module;
  std::string step;                      // of the captured call, as the capture says
  std::string slice;                     // the part of a big call an audit capture kept; empty: all of it
  std::string captured_on, replayed_on;  // devices
  std::string note;                      // how the capture was turned into the call replayed, when not as captured
  std::string incomplete;   // what of the call the capture lacks (a score_mod, softcap...): empty when complete
  std::string dtype;        // of the query
  std::string main_kernel;  // of the captured call, when known
  std::vector<std::string> kernels;
  std::string kernels_from;       // run (traced in the run), replay (this replay traced the
                                  // captured backend), or empty: unknown
  std::string kernel_tracing;     // why backends[].kernels are empty on CUDA, when they are
  std::string injected;           // role corrupted by --inject in the run
  std::string captured_edge;      // clean, source, propagated (when captured)
  std::string reference_problem;  // empty: the reference is valid
  std::string reference_device = "cpu";
  std::optional<BackendRun> captured;  // the outputs the run itself produced
  std::optional<BackendRun> received;  // audit of a backward: the O and LSE its forward gave it
  std::vector<BackendRun> backends;
  std::optional<Reruns> reruns;                  // unset where replay does not rerun (audit, kernels)
  std::vector<std::string> yardstick_nonfinite;  // tensors the yardstick itself could not compute
  Conditions conditions;
  RootCause root_cause;
  std::vector<std::string> notes;
  std::vector<LayoutReport> layouts;  // each captured tensor's memory layout, recorded and replayed
  std::string layout;        // the call's tensor layout as captured (arg.layout: bhsd, bshd, thd); empty: not said
  std::string flex_backend;  // FlexAttention's kernel_options["BACKEND"] when the capture says
  // Where the call ran, as its capture says: "torch" (version), "cudnn" (cuDNN's integer
  // version), "gpu" ("NVIDIA H200 (sm_90)"), and the bootstrap's facts (cuda_build, cudnn_loaded,
  // cudnn_library, triton, ptxas, flash_attn_4). What the known-issue matcher checks versions against.
  std::map<std::string, std::string> environment;
};

// Whether a rerun of the captured backend gave the run's result: every role the run's outputs
// were judged on has the same verdict class (ok, or the same failure).
bool reproduces(const BackendRun& rerun, const BackendRun& captured);

// Applies DESIGN.md's root-cause table to the verdicts (first match wins).
RootCause findRootCause(const ReplayResult& r);

nlohmann::json toJson(const ReplayResult& r);
std::string toText(const ReplayResult& r);

// The audit of a capture (`nanprov run --audit`, `nanprov replay --audit`): only the outputs the
// run produced, judged against the reference. `verdict` is the worst of its tensors' (ok,
// suspect, silent-wrong, all-zero, non-finite); anything but ok is a finding.
Verdict worstVerdict(const BackendRun& run);
nlohmann::json auditJson(const ReplayResult& r, double seconds);
// An audit capture the engine could not judge, and why.
nlohmann::json notAuditedJson(const ReplayResult& r, const std::string& why);
// One line: "audit rank0:layer1:call0 (step 0, fwd, flash_cpu): O all-zero ..." or "... ok".
std::string auditText(const ReplayResult& r);

// replay's exit code: 0 when no fault recurred (none, not-reproduced, cannot-judge), 1 when one did.
int exitCodeOf(const RootCause& cause);

}  // namespace nanprov::replay
