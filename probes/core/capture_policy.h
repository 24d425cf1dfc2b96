// CapturePolicy: which checked calls are captured (DESIGN.md, "Capture and replay"). By default
// the first source edge of this rank; also every call a --capture selector matches, and every Nth
// call with --capture-every N. With --audit, the calls `nanprov run` judges against the float64
// reference while the training runs (DESIGN.md, "Audit"):
//  - the first pass: every (call signature, layer, phase) at its first clean call;
//  - the rotation: then, at each optimizer step, every clean call of the layer judged least
//    recently (ties: the lowest layer), so each layer is judged again every (layers) steps, while
//    the rotation's own cost stays within --audit-budget percent of the run's time: the training
//    thread's time taking its captures plus the judge's time judging them, which the judge
//    counts in rank-<r>.audit-progress (store/mapped_counters.h). Under budget, a new rotation
//    starts while the judge trails the rotation's captures by less than one cycle. The first pass and a
//    new regime's first call are judged whatever they cost; neither their captures' training-thread
//    time nor the judge's time judging them is charged to the rotation, nor does it wait for them;
//  - or, with --audit-every N, every clean call of every N-th step (a complete audit).
// Each within a byte budget per rank (audits: bytes captured and not judged yet): a call that does
// not fit is skipped, and the store says so; an audit skipped so is tried again later. No
// LibTorch: unit-tested on plain records.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/records/call_event.h"
#include "base/records/call_record.h"
#include "base/records/run_counters.h"
#include "base/status.h"
#include "probes/core/call_selector.h"
#include "probes/core/condition_regime.h"

namespace nanprov::probes {

inline constexpr int64_t kDefaultCaptureBytes = int64_t{1} << 30;
inline constexpr int64_t kDefaultAuditBytes = int64_t{256} << 20;
// A call whose tensors are bigger is audited on a slice of its (batch, head) pairs (audit_slice.h).
inline constexpr int64_t kDefaultAuditSliceBytes = int64_t{16} << 20;

// The audit's default share of the run's time (--audit-budget, in percent); at or above
// kUnboundedAuditPercent the rotation judges one layer at every step, whatever it costs.
inline constexpr double kDefaultAuditPercent = 1.0;
inline constexpr double kUnboundedAuditPercent = 100.0;

struct AuditPlan {
  bool on = false;                                // --audit
  int64_t every_steps = 0;                        // --audit-every; 0: first pass, then the rotation
  double budget_percent = kDefaultAuditPercent;   // --audit-budget
  int64_t budget_bytes = kDefaultAuditBytes;      // --audit-max-bytes: captured, not judged yet
  int64_t slice_bytes = kDefaultAuditSliceBytes;  // --audit-slice-bytes
};

// What the judge has done with this rank's audit captures so far.
struct AuditProgress {
  int64_t judged = 0;    // captures judged (or given up on)
  int64_t judge_ns = 0;  // time spent judging the rotation's (the budget's share)
};

// How often the process that ran the first source edge runs its call in all, right when it
// captures it (call_rerun.h); `nanprov run --reruns`, 0: not rerun.
inline constexpr int64_t kDefaultEdgeReruns = 5;

struct CapturePlan {
  bool first_source_edge = true;  // off with `nanprov run --no-capture`
  int64_t edge_reruns = kDefaultEdgeReruns;
  bool rerun_user_ops = false;          // a --probe-op too: asked for by giving `nanprov run --reruns`
  std::vector<CallSelector> selectors;  // --capture
  int64_t every = 0;                    // --capture-every; 0: off
  int64_t budget_bytes = kDefaultCaptureBytes;
  AuditPlan audit;
};

// One --capture selector: comma-separated key=value pairs of rank, layer, step, from-step, call, phase.
StatusOr<CallSelector> parseCaptureSelector(const std::string& text);

// From NANPROV_CAPTURE (selectors separated by ';'), NANPROV_CAPTURE_EVERY,
// NANPROV_CAPTURE_BYTES, NANPROV_CAPTURE_FIRST_EDGE=0, NANPROV_RERUNS and NANPROV_AUDIT, NANPROV_AUDIT_EVERY,
// NANPROV_AUDIT_BYTES, NANPROV_AUDIT_SLICE_BYTES, as `nanprov run` sets them.
StatusOr<CapturePlan> capturePlanFromEnvironment();

class CapturePolicy {
 public:
  using ProgressReader = std::function<AuditProgress()>;
  using Clock = std::function<int64_t()>;  // monotonic nanoseconds
  // `progress` reads the judge's counts (none: the rotation never sees a judgement, so it runs
  // only unbounded); `clock` is for tests.
  void configure(CapturePlan plan, ProgressReader progress = {}, Clock clock = {});

  // Why `rec`, whose health is known and classified (rec.health), is captured; nullopt when it is not. The first source
  // edge is claimed by the first call that asks; audits as the header says, `audit_key` naming
  // the call's (signature, layer, phase), hashed (auditKey() in call_capture.cpp).
  // Takes no lock when only the first source edge is wanted and `rec` is none (every call of a
  // default run but that one).
  // An audit taken because the call's conditions left the regime its key was last judged in
  // (condition_regime.h) says what changed in *regime_change; one the rotation took sets
  // *by_rotation, so its judge's time is charged to the budget (kRotationJudgeNs).
  std::optional<CaptureTrigger> triggerFor(const CallEvent& rec, std::optional<uint64_t> audit_key = std::nullopt,
                                           std::string* regime_change = nullptr, bool* by_rotation = nullptr);

  // Whether audits are on: only then is a call's audit key worth working out.
  bool auditing() const { return auditing_.load(std::memory_order_relaxed); }
  AuditPlan auditPlan();
  int64_t edgeReruns();
  bool rerunUserOps();

  // Takes `bytes` from the trigger's budget (audits have their own, given back as the judge
  // catches up); false, taking nothing, when they do not fit. An audit that does not fit is
  // tried again at a later call of its key.
  bool reserve(int64_t bytes, CaptureTrigger trigger = CaptureTrigger::kSelector,
               std::optional<uint64_t> audit_key = std::nullopt);
  // Time the training thread spent taking the audit capture of `audit_key`'s call; the budget
  // counts it only when the rotation took it.
  void addAuditCost(int64_t ns, std::optional<uint64_t> audit_key = std::nullopt);
  // An audit capture that will never be judged (its file could not be written).
  void auditLost();

  // What the rotation did, for the store's meta: rotations run, and steps whose rotation the
  // budget (or a judge behind) held back.
  struct RotationCounts {
    int64_t rotations = 0, held_back = 0;
    int64_t regime_changes = 0;  // calls judged again because their conditions changed
  };
  RotationCounts rotationCounts();

  // Every regime each audit key met, for the store's meta (RunCounters::audit_regimes): the report
  // says which were seen and never judged, so a clean --audit run claims no more than was judged.
  std::map<std::string, AuditRegime> regimes();

 private:
  static constexpr size_t kRegimesKept = 8;
  // A regime a key met: when, how often, and the step it was last taken to be judged in.
  struct SeenRegime {
    ConditionRegime regime;
    std::string text;  // regimeText(regime), said once
    int64_t first_seen = 0, last_seen = 0, calls = 0;
    int64_t last_judged = -1, previous_judged = -1;  // -1: never
  };
  struct AuditedKey {
    int64_t layer = 0;
    Phase phase = Phase::kForward;
    int64_t ordinal = 0;                         // the order keys were met in: the regimes' meta rows are named by it
    int64_t last_step = -1, previous_step = -1;  // -1: never judged
    // The regimes it met (at most kRegimesKept, each in its slot for its life): a regime judged
    // before is not new again. The slot the last judgement was for, and whether it was for a new
    // regime, so that a judgement the budget refused is taken back whole.
    std::vector<SeenRegime> regimes;
    int judged_slot = -1;
    bool for_new_regime = false;
    bool by_rotation = false;  // the last judgement was the rotation's (its cost is the budget's)
  };
  // The slot of the regime `rec`'s call ran in, met now: the first judged regime it is in, else
  // the first seen one, else a new slot (the least recently seen, judged ones first, once full).
  static int regimeSlot(AuditedKey& key, const ConditionRegime& now, int64_t step);
  // The judgement of a key the byte budget refused, taken back: it is tried again at a later call.
  void takeBack(AuditedKey& key);
  // At the first call of a new step: which layer's calls, if any, this step's rotation audits.
  void decideRotation(int64_t step);
  bool rotationAffordable();
  // Gives back the audit bytes of captures the judge has judged since the last look.
  void catchUp();

  std::mutex mu_;
  CapturePlan plan_;
  ProgressReader progress_;
  Clock clock_;
  std::atomic<bool> auditing_{false};  // plan_.audit.on, read on every call without the lock
  // No selector, no --capture-every, no audit: only a source edge can be captured.
  std::atomic<bool> edges_only_{false};
  bool source_edge_taken_ = false;
  int64_t used_bytes_ = 0;

  std::unordered_map<uint64_t, AuditedKey> audited_;  // audit key → its layer and last audit
  int64_t rotation_step_ = -1;                        // the step whose rotation is decided
  std::optional<int64_t> rotation_layer_;             // this step's, when one runs
  RotationCounts counts_;
  int64_t started_ns_ = -1;    // the first audit: the budget counts the run's time from there
  int64_t audit_cost_ns_ = 0;  // the training thread's, over the run
  // Whether an audited call ran on a GPU: the judge then runs on the training's device, and its
  // time is the training's. On the CPU it is a process of its own, niced, which the training
  // waits for only through the rotation's "judged the last one first" rule.
  bool judged_on_device_ = false;
  int64_t written_ = 0;                    // audit captures handed over to be judged
  int64_t unpaced_written_ = 0;            // of them, the first pass's and new regimes' (not the rotation's)
  int64_t judged_seen_ = 0;                // of them, judged (or lost) as of the last look
  std::deque<int64_t> outstanding_bytes_;  // bytes of each capture not judged yet, oldest first
  int64_t outstanding_total_ = 0;
  int64_t lost_ = 0;
};

}  // namespace nanprov::probes
