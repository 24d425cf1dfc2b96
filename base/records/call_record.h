// What the probes observe about one attention call, in plain types. The store writes these, the
// readers return them, and the analysis classifies them. No SQLite, no LibTorch here.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/records/device.h"
#include "base/records/dtype_name.h"
#include "base/records/role.h"
#include "base/records/tensor_shape.h"

namespace nanprov {

// What a step counts: optimizer steps (training), or forward passes (inference, no optimizer).
enum class StepUnit { kOptimizerStep, kForwardPass };
const char* stepUnitName(StepUnit u);  // "optimizer_step" | "forward_pass", in the store's meta and the JSON

enum class Phase { kForward, kBackward };
const char* phaseName(Phase p);  // "fwd" | "bwd"
bool parsePhase(const std::string& text, Phase* out);

// Health of one tensor of one call. Counts are exact. Plain values, no strings: the probes fill
// one per tensor on the training thread, and only the store's writer thread spells them out.
struct TensorHealth {
  Role role = Role::kQ;
  DtypeName dtype;    // e.g. "BFloat16"
  TensorShape shape;  // e.g. [2,4,64,32]
  int64_t numel = 0;
  int64_t nan = 0;
  int64_t posinf = 0;
  int64_t neginf = 0;
  double max_abs = 0.0;  // largest finite |x|
  bool all_zero = false;
  int64_t masked_rows = -1;  // masks only: query rows with no visible key; -1 otherwise
  // S and LSE, where the CPU checks read them: the largest finite x above 0 (0 when none). A mask
  // hides keys with fills below 0 (-1e4, -1e9, finfo.min, -inf), so this is the largest logit
  // whatever the mask, where max_abs would be the fill's. NaN where not measured (the CUDA
  // checks, other roles). In memory only: the trend reads it on the writer thread.
  double max_positive = std::numeric_limits<double>::quiet_NaN();

  int64_t nonfinite() const { return nan + posinf + neginf; }
};

struct CallRecord {
  int64_t seq = 0;  // per-rank global sequence number, from 0
  int rank = 0;
  int64_t step = 0;    // optimizer steps completed before the call (inference: forward passes)
  int64_t layer = -1;  // one number per attention module (see CallIdentity)
  int64_t call = 0;    // ordinal of calls of this (rank, layer), forward and backward alike
  Phase phase = Phase::kForward;
  int64_t fwd_seq = -1;    // backward: seq of the forward it differentiates; recompute: the original
  bool recompute = false;  // a forward that activation checkpointing recomputed during backward
  std::string op;          // e.g. "aten::_scaled_dot_product_flash_attention_for_cpu"
  std::string backend;     // e.g. "flash_cpu", "math", "cudnn"
  std::string module;      // module path, may be empty
  int64_t start_ns = 0;    // CLOCK_REALTIME, comparable across ranks of one host
  int64_t end_ns = 0;
  std::string injected;  // role that was corrupted by --inject, empty when none
  // Roles changed in place between the call and its deferred check ("dQ" or "dQ,dK"), empty when
  // none: their counts were left out, so the call is judged on its other tensors only.
  std::string modified;
  // The call's dropout probability, where its op or probe says (SDPA's dropout_p; MHA's and Hugging
  // Face eager attention's, 0 outside training); nullopt where nothing says.
  std::optional<double> dropout_p;
  Device device;             // the CPU or a CUDA device
  std::string unattributed;  // why its kernels are not known; empty when they are
  int health = 0;  // 0 clean, 1 source edge, 2 propagated (base/records/call_health.h EdgeKind), set by the probes
  std::vector<TensorHealth> tensors;
};

// The unit fully masked rows are counted in, wherever they are shown: query rows over batch and
// heads, as replay counts them.
inline constexpr const char* kMaskedRowsUnit = "query rows (over batch and heads) have every key masked";

// A mask's fully masked rows in that unit. The probes count the rows of the mask tensor, which
// may broadcast over batch or heads; each then stands for the B·H·S_q / mask-rows query rows it
// covers (Q's rows, B·H·S_q in any layout: its numel over head_dim). nullopt when the call holds
// no Q or the rows do not divide.
std::optional<int64_t> maskedQueryRows(const CallRecord& call, const TensorHealth& mask);

// One kernel that ran inside an attention call. On CUDA it is a CUPTI CONCURRENT_KERNEL record
// joined to the call through the external correlation id; on the CPU it is the ATen op itself.
// Field names follow Nsight Systems' CUPTI_ACTIVITY_KIND_KERNEL export where they fit.
struct KernelRecord {
  int rank = 0;
  int64_t seq = -1;            // the attention call it belongs to
  int64_t correlation_id = 0;  // CUPTI correlation id of the launch; 0 on the CPU
  std::string name;            // demangled
  int grid[3] = {0, 0, 0};
  int block[3] = {0, 0, 0};
  int64_t start_ns = 0;  // GPU timestamps from CUPTI's clock; CLOCK_REALTIME on the CPU
  int64_t end_ns = 0;
  int device = -1;  // -1: the CPU
  int64_t stream = -1;
};

using CallKernels = std::vector<const KernelRecord*>;

// A demangled name without template arguments and parameters:
// "cudnn::fusion::compute_dot_do_o_specialized<...>(...)" → "cudnn::fusion::compute_dot_do_o_specialized".
std::string shortKernelName(const std::string& name);

// The kernel that ran longest: the attention kernel itself, not the copies and fills around it.
const KernelRecord* mainKernel(const CallKernels& kernels);
const KernelRecord* mainKernel(const std::vector<KernelRecord>& kernels);  // the same over owned records

// Why a call was captured: the first call that turned finite inputs non-finite, a --capture
// selector, --capture-every, or the audit.
enum class CaptureTrigger { kFirstSourceEdge, kSelector, kEvery, kAudit };
const char* captureTriggerName(CaptureTrigger t);  // "first-source-edge" | "selector" | "every" | "audit"
std::optional<CaptureTrigger> captureTriggerNamed(std::string_view name);

// One capture decision: a capture file written for a call, or why it was skipped.
struct CaptureRecord {
  int rank = 0;
  int64_t seq = -1;  // the captured call
  CaptureTrigger trigger = CaptureTrigger::kSelector;
  std::string path;  // relative to the run directory; empty when skipped
  int64_t bytes = 0;
  std::string skipped;  // why no file was written; empty when it was
  // The captured call's, as the reader finds it in the calls table (step and layer -1 when it is
  // not there).
  int64_t step = -1, layer = -1;
  Phase phase = Phase::kForward;
};

// Which tensor of a parameter the gradient sentinel found non-finite: its gradient, or its value
// after the optimizer applied that gradient. uint8_t: the sentinel keeps one per tensor in flight.
enum class SentinelTensor : uint8_t { kGrad = 0, kParam = 1 };
const char* sentinelTensorName(SentinelTensor t);  // "grad" | "param", in the store's sentinel table
std::optional<SentinelTensor> sentinelTensorNamed(std::string_view name);

// The gradient sentinel's finding: a parameter whose gradient (at the end of `step`), or whose
// value after the optimizer applied it, holds NaN or Inf. Only the first such step is recorded.
struct SentinelRecord {
  int rank = 0;
  int64_t step = 0;
  SentinelTensor tensor = SentinelTensor::kGrad;
  std::string parameter;  // name from named_parameters(), or "param<i>" when unknown
  double norm = 0.0;      // max |x| over the tensor: NaN or Inf
};

// What a module call was seen to receive (forward: its arguments, however nested; backward: the
// gradients of its outputs). Only kFinite lets the report say it made a value "from finite
// inputs": a module handed no tensor, or handed objects the trail does not look into, made its
// values from something nanprov did not see.
enum class ModuleInputs {
  kFinite,      // at least one tensor, all seen, all finite (integer tensors are finite)
  kNonFinite,   // some seen input held NaN/Inf
  kNone,        // it received no tensor
  kPartlySeen,  // what was seen was finite, but not everything it received was seen
};
const char* moduleInputsName(ModuleInputs m);  // "finite" | "non_finite" | "none" | "partly_seen"
bool parseModuleInputs(const std::string& text, ModuleInputs* out);

// `nanprov run --trail`: one module call whose output held NaN/Inf, forward (its output) or
// backward (the gradient it sent to one of its inputs). The modules that only passed on what
// they received have inputs kNonFinite; the first one with finite inputs made the values.
struct ModuleCheckRecord {
  int rank = 0;
  int64_t step = 0;
  Phase phase = Phase::kForward;
  std::string module;                           // module path ("transformer.h.0.ln_1"); "" for the outermost module
  std::string module_class;                     // "LayerNorm"
  ModuleInputs inputs = ModuleInputs::kFinite;  // forward: its arguments; backward: the gradients it received
  int64_t nan = 0, posinf = 0, neginf = 0;      // in its outputs (backward: the gradient it sent)
  double largest_input = 0.0;                   // largest finite |x| among its inputs (backward: received gradients)
  int64_t order = 0;                            // per rank, in the order the module calls ended (inner modules first)
  int64_t time_ns = 0;                          // CLOCK_REALTIME when it ended, to order ranks of one host
  // Backward: which gradient it sent (an identity, equal for the modules that share that input
  // tensor and so were all handed the sum of their gradients); 0 in the forward.
  int64_t gradient = 0;
  // Inside torch.compile'd code a module is checked only where Inductor writes values to memory
  // anyway: these modules ran between the values its check read as inputs and its output,
  // unchecked, and may have made what it is blamed for. Empty for a module checked by its hook.
  std::vector<std::string> unchecked_before;

  int64_t nonfinite() const { return nan + posinf + neginf; }
  bool inputsFinite() const { return inputs == ModuleInputs::kFinite; }
};

}  // namespace nanprov
