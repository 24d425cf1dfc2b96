#include "probes/libtorch/call_capture.h"

#include <ATen/ATen.h>
#include <ATen/detail/CUDAHooksInterface.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>

#include "base/log_once.h"
#include "base/pointer_alignment.h"
#include "base/records/call_health.h"
#include "base/records/call_name.h"
#include "base/records/device_identity.h"
#include "base/records/roles.h"
#include "base/records/torch_dtype.h"
#include "probes/core/audit_slice.h"
#include "probes/core/run_facts.h"
#include "probes/core/session.h"
#include "probes/libtorch/call_rerun.h"
#include "probes/libtorch/device_queue.h"
#include "store/capture_file.h"

namespace nanprov::probes {
namespace {

// Bookkeeping tensors without a role (philox seed and offset) are kept when at most this big.
constexpr int64_t kMaxExtraElements = 64;

// Arguments replay cannot do without, whatever their size: the fast-path op projects Q, K and V
// itself, so its capture holds the projection weights (aten::_native_multi_head_attention), and
// a FlexAttention call's materialised bias stands for its score_mod and block mask, and packed
// sequences need their boundaries (cu_seqlens).
bool neededForReplay(std::string_view arg) {
  return arg == "qkv_weight" || arg == "qkv_bias" || arg == "proj_weight" || arg == "proj_bias" || arg == "mask" ||
         arg == "cu_seqlens_q" || arg == "cu_seqlens_k";
}

bool capturedArgument(std::string_view name, const c10::IValue& value) {
  if (!value.isTensor() || !value.toTensor().defined()) return false;
  return neededForReplay(name) || value.toTensor().numel() <= kMaxExtraElements;
}
// Kernel names of this many recent calls are kept: a call's kernels may be collected at an
// earlier step boundary than its check result.
constexpr size_t kRecentCalls = 1024;
// At exit, how long the training process may wait for capture files still being written.
constexpr auto kExitWait = std::chrono::seconds(120);

std::string listText(at::IntArrayRef values) {
  std::string s = "[";
  for (size_t i = 0; i < values.size(); ++i) s += (i ? "," : "") + std::to_string(values[i]);
  return s + "]";
}

std::string doubleText(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// A dense host copy of `t` (one device-to-host copy for a CUDA tensor). Reading only.
std::optional<store::CaptureTensor> hostCopy(const std::string& name, const at::Tensor& t) {
  const char* dtype = captureDtypeOf(t.scalar_type());
  if (!dtype || !t.defined() || !t.has_storage()) return std::nullopt;
  at::Tensor host = t.detach().to(at::kCPU).contiguous();
  store::CaptureTensor out;
  out.name = name;
  out.dtype = dtype;
  out.shape.assign(host.sizes().begin(), host.sizes().end());
  const auto* data = static_cast<const uint8_t*>(host.data_ptr());
  out.bytes.assign(data, data + host.nbytes());
  return out;
}

void describeArgs(const CallArgs& args, store::CaptureFile& file) {
  for (const auto& [name, value] : args) {
    std::string key = "arg." + std::string(name);
    if (value.isNone()) file.metadata[key] = "None";
    else if (value.isBool()) file.metadata[key] = value.toBool() ? "true" : "false";
    else if (value.isDouble()) file.metadata[key] = doubleText(value.toDouble());
    else if (value.isInt()) file.metadata[key] = std::to_string(value.toInt());
    else if (value.isString()) file.metadata[key] = value.toStringRef();
    else if (value.isSymInt()) file.metadata[key] = std::to_string(value.toSymInt().guard_int(__FILE__, __LINE__));
    else if (capturedArgument(name, value)) {
      if (auto t = hostCopy(std::string(name), value.toTensor())) file.tensors.push_back(std::move(*t));
    }
  }
}

std::string fileNameOf(const CallEvent& rec) {
  return "rank" + std::to_string(rec.rank) + "-layer" + std::to_string(rec.layer) + "-call" + std::to_string(rec.call) +
         "-" + phaseName(rec.phase) + "-seq" + std::to_string(rec.seq) + ".safetensors";
}

// A call's (signature, layer, phase) as the audit counts them, hashed (FNV-1a) from what the record
// already holds, so that an audited run builds no string per call: op, backend, device, layer,
// phase, every tensor's role, dtype and shape (the mask's kind and dtype among them), and the
// scalar flags (causal, scale, window, GQA).
uint64_t auditKey(const CallEvent& rec, const CallArgs& args) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](const void* data, size_t n) {
    for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<const unsigned char*>(data)[i]) * 1099511628211ull;
    h = (h ^ 0x1f) * 1099511628211ull;  // a separator: ("ab", "c") and ("a", "bc") differ
  };
  auto text = [&mix](std::string_view s) { mix(s.data(), s.size()); };
  text(rec.op), text(rec.backend);
  mix(&rec.device.index, sizeof rec.device.index);
  mix(&rec.layer, sizeof rec.layer);  // per layer and phase: a fault can depend on one layer's data
  mix(&rec.phase, sizeof rec.phase);
  for (const TensorHealth& t : rec.tensors) {
    text(roleName(t.role)), text(t.dtype.c_str());
    mix(t.shape.dims.data(), sizeof(int64_t) * static_cast<size_t>(t.shape.ndim));
  }
  for (const auto& [name, value] : args) {
    if (value.isTensor()) continue;
    text(name);
    if (value.isBool()) text(value.toBool() ? "true" : "false");
    else if (value.isDouble()) {
      double d = value.toDouble();
      mix(&d, sizeof d);
    } else if (value.isInt()) {
      int64_t i = value.toInt();
      mix(&i, sizeof i);
    } else text(value.isNone() ? "None" : "?");
  }
  return h;
}

// Why the audit cannot judge a call whose outputs are random by design; empty when it can.
std::string unauditable(const CallArgs& args) {
  for (const auto& [name, value] : args) {
    if (name == "dropout_p" && value.isDouble() && value.toDouble() > 0) {
      return "the call uses dropout " + doubleText(value.toDouble()) + ", which the reference cannot replay";
    }
  }
  return "";
}

const at::Tensor* roleTensor(const RoleTensors& tensors, Role role) {
  for (const auto& [r, t] : tensors) {
    if (r == role && t.defined()) return &t;
  }
  return nullptr;
}

// `t` with only `index` (ascending) along `dim`, laid out as `t` is (its dimensions in the same
// stride order), so that a replay of the slice feeds the kernel the layout the run did. Cut as
// runs of consecutive indices (narrow, then cat): no index tensor has to reach the device.
at::Tensor selectKeepingLayout(const at::Tensor& t, int64_t dim, const std::vector<int64_t>& index) {
  std::vector<at::Tensor> runs;
  for (size_t i = 0; i < index.size();) {
    size_t j = i;
    while (j + 1 < index.size() && index[j + 1] == index[j] + 1) ++j;
    runs.push_back(t.narrow(dim, index[i], index[j] - index[i] + 1));
    i = j + 1;
  }
  at::Tensor picked = runs.size() == 1 ? runs[0] : at::cat(runs, dim);
  std::vector<int64_t> order(static_cast<size_t>(t.dim()));
  for (int64_t d = 0; d < t.dim(); ++d) order[static_cast<size_t>(d)] = d;
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return t.stride(a) > t.stride(b); });
  std::vector<int64_t> strides(order.size());
  int64_t step = 1;
  for (size_t i = order.size(); i-- > 0;) {
    strides[static_cast<size_t>(order[i])] = step;
    step *= std::max<int64_t>(1, picked.size(order[i]));
  }
  return at::empty_strided(picked.sizes(), strides, picked.options()).copy_(picked);
}

// The slice of one role's tensor, along the call's own axes (audit_slice.h): Q-like roles by query
// head, K-like by KV head; LSE is [batch, heads, rows] (or [heads, total] when packed); a mask along
// the dimensions it does not broadcast over ([B|1, H|1, rows, keys], or [H|1, rows, keys]).
at::Tensor sliceRole(Role role, const at::Tensor& t, const AuditSlice& s, const AuditShape& shape,
                     const SliceAxes& axes) {
  const bool kv = role == Role::kK || role == Role::kV || role == Role::kdK || role == Role::kdV;
  at::Tensor out = t.detach();
  if (role == Role::kMask) {
    const int64_t lead = out.dim() - 2;  // dimensions before [rows, keys]
    if (lead >= 2 && out.size(lead - 2) == shape.batch && shape.batch > 1)
      out = selectKeepingLayout(out, lead - 2, s.batches);
    if (lead >= 1 && out.size(lead - 1) == shape.q_heads && shape.q_heads > 1)
      out = selectKeepingLayout(out, lead - 1, s.q_heads);
    return out;
  }
  if (role == Role::kLSE) {
    if (axes.batch_dim < 0) return out.dim() >= 1 ? selectKeepingLayout(out, 0, s.q_heads) : out;
    return out.dim() < 2 ? out : selectKeepingLayout(selectKeepingLayout(out, 0, s.batches), 1, s.q_heads);
  }
  if (out.dim() <= axes.heads_dim) return out;
  if (axes.batch_dim >= 0) out = selectKeepingLayout(out, axes.batch_dim, s.batches);
  return selectKeepingLayout(out, axes.heads_dim, kv ? s.kv_heads : s.q_heads);
}

std::string stringArg(const CallArgs& args, std::string_view name) {
  for (const auto& [arg, value] : args) {
    if (arg == name && value.isString()) return value.toStringRef();
  }
  return "";
}

// The part of a big call the audit keeps (audit_slice.h); nullopt to keep it whole.
std::optional<AuditSlice> auditSliceOf(const CallEvent& rec, const RoleTensors& tensors, const CallArgs& args,
                                       int64_t bytes, int64_t slice_bytes, AuditShape* shape, SliceAxes* axes) {
  const at::Tensor* q = roleTensor(tensors, Role::kQ);
  const at::Tensor* k = roleTensor(tensors, Role::kK);
  auto found = sliceAxesOf(rec.op, stringArg(args, "layout"));
  if (!found || !q || !k) return std::nullopt;
  *axes = *found;
  const bool packed = axes->batch_dim < 0;
  if (q->dim() != (packed ? 3 : 4) || k->dim() != q->dim()) return std::nullopt;
  *shape = {.batch = packed ? 1 : q->size(axes->batch_dim),
            .q_heads = q->size(axes->heads_dim),
            .kv_heads = k->size(axes->heads_dim)};
  auto slice = chooseAuditSlice(*shape, bytes, slice_bytes);
  if (slice && packed) slice->text.replace(0, slice->text.find(';'), "every sequence");  // not "batches 0 of 1"
  return slice;
}

}  // namespace

void Captures::offer(const CallEvent& rec, const RoleTensors& tensors, const CallArgs& args, const char* missing) {
  try {
    offerGuarded(rec, tensors, args, missing);
  } catch (const std::exception& e) {
    logOnce("capture", std::string("capturing a call failed, training continues: ") + e.what());
  }
}

void Captures::release(const std::vector<KernelRecord>& kernels, bool at_exit) {
  try {
    releaseGuarded(kernels, at_exit);
  } catch (const std::exception& e) {
    logOnce("capture release", std::string("writing captures failed, training continues: ") + e.what());
  }
}

void Captures::offerGuarded(const CallEvent& rec, const RoleTensors& tensors, const CallArgs& args,
                            const char* missing) {
  CapturePolicy& policy = session_.capturePolicy();
  const std::optional<uint64_t> key = policy.auditing() ? std::optional(auditKey(rec, args)) : std::nullopt;
  AuditReason reason;
  const std::optional<CaptureTrigger> trigger = policy.triggerFor(rec, key, &reason.regime_change, &reason.by_rotation);
  if (!trigger) return;
  if (tensors.empty()) {
    CaptureRecord row;
    row.seq = rec.seq;
    row.trigger = *trigger;
    row.skipped = missing ? missing : "its tensors were released before the check finished (over NANPROV_HOLD_BYTES)";
    session_.recordCapture(std::move(row));
    return;
  }
  if (*trigger != CaptureTrigger::kAudit) return take(rec, tensors, args, *trigger, key, {});
  // The audit's own cost on the training thread (slicing, the copy to the host), which its
  // budget counts.
  const auto started = std::chrono::steady_clock::now();
  take(rec, tensors, args, *trigger, key, reason);
  policy.addAuditCost(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - started).count(), key);
}

void Captures::take(const CallEvent& rec, const RoleTensors& tensors, const CallArgs& args, CaptureTrigger trigger,
                    std::optional<uint64_t> key, const AuditReason& reason) {
  CapturePolicy& policy = session_.capturePolicy();
  CaptureRecord row;
  row.seq = rec.seq;
  row.trigger = trigger;
  int64_t bytes = 0;
  for (const auto& [role, t] : tensors) bytes += static_cast<int64_t>(t.nbytes());
  for (const auto& [name, value] : args) {
    if (capturedArgument(name, value)) bytes += static_cast<int64_t>(value.toTensor().nbytes());
  }
  // A call whose tensors replay could not rebuild (the probe knew): said instead of a capture
  // replay would refuse.
  if (std::string why = stringArg(args, "unreplayable"); !why.empty()) {
    row.skipped = "replay could not rebuild it: " + why;
    session_.recordCapture(std::move(row));
    return;
  }
  const RoleTensors* kept = &tensors;
  RoleTensors sliced;
  std::optional<AuditSlice> slice;
  if (trigger == CaptureTrigger::kAudit) {
    if (std::string why = unauditable(args); !why.empty()) {
      row.skipped = why;
      session_.recordCapture(std::move(row));
      return;
    }
    AuditShape shape;
    SliceAxes axes;
    slice = auditSliceOf(rec, tensors, args, bytes, policy.auditPlan().slice_bytes, &shape, &axes);
    if (slice) {
      for (const auto& [role, t] : tensors) {
        sliced.emplace_back(role, sliceRole(role, t, *slice, shape, axes));
        bytes -= static_cast<int64_t>(t.nbytes()) - static_cast<int64_t>(sliced.back().second.nbytes());
      }
      kept = &sliced;
    }
  }
  // An audit skip has no per-call figure: the report groups calls not audited by their reason.
  if (!policy.reserve(bytes, trigger, key)) {
    row.skipped = trigger == CaptureTrigger::kAudit
                      ? std::string("over the audit budget: the judge was behind by --audit-max-bytes of captures")
                      : "over the capture budget (nanprov run --capture-bytes): " + std::to_string(bytes) + " bytes";
    session_.recordCapture(std::move(row));
    return;
  }
  CaptureJob job;
  if (trigger == CaptureTrigger::kFirstSourceEdge) rerunEdge(rec, tensors, args, job.file);
  job.row = std::move(row);
  job.row.path = fileNameOf(rec);
  job.row.bytes = bytes;
  job.unattributed = rec.unattributed;
  describe(rec.record(), *kept, args, job.file);  // strings for the file: this call is captured
  describeLayout(tensors, job.file);
  job.file.metadata["trigger"] = captureTriggerName(trigger);
  if (slice) job.file.metadata["slice"] = slice->text;
  if (!reason.regime_change.empty()) job.file.metadata["audit.regime_change"] = reason.regime_change;
  if (reason.by_rotation) job.file.metadata["audit.by_rotation"] = "1";
  if (rec.device.isCpu()) {
    job.file.metadata["kernels"] = rec.op;  // on the CPU the ATen op is the kernel
    job.file.metadata["kernel.main"] = rec.op;
    writer_.push(std::move(job));
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  waiting_.push_back(std::move(job));
  ++device_copies_;
}

void Captures::rerunEdge(const CallEvent& rec, const RoleTensors& tensors, const CallArgs& args,
                         store::CaptureFile& file) {
  const int64_t runs = session_.capturePolicy().edgeReruns();
  if (runs <= 0) return;
  CallReruns reruns;
  if (session_.closing()) {
    reruns.not_rerun = "its check finished as the process exited";
  } else {
    CapturePolicy& policy = session_.capturePolicy();
    reruns = rerunCall(rec, tensors, args, static_cast<int>(std::min<int64_t>(runs, 1000)),
                       classify(rec.record()).nonfinite_outputs, policy.rerunUserOps());
  }
  describeReruns(reruns, file.metadata);
}

void Captures::releaseGuarded(const std::vector<KernelRecord>& kernels, bool at_exit) {
  std::vector<CaptureJob> ready;
  int64_t copies;
  {
    std::lock_guard<std::mutex> lock(mu_);
    copies = device_copies_;
    for (const KernelRecord& k : kernels) recent_[k.seq].push_back(k);
    while (recent_.size() > kRecentCalls) recent_.erase(recent_.begin());
    ready.swap(waiting_);
    for (CaptureJob& job : ready) {
      auto it = recent_.find(job.row.seq);
      std::string names;
      CallKernels call_kernels;
      if (it != recent_.end()) {
        for (const KernelRecord& k : it->second) {
          names += (names.empty() ? "" : "\n") + k.name;
          call_kernels.push_back(&k);
        }
      }
      job.file.metadata["kernels"] = names;
      if (const KernelRecord* main = mainKernel(call_kernels)) job.file.metadata["kernel.main"] = main->name;
      if (names.empty()) job.file.metadata["kernels_unattributed"] = job.unattributed;
    }
  }
  for (CaptureJob& job : ready) writer_.push(std::move(job));
  if (copies > 0) session_.setCounters({.capture_host_copies = copies});
  if (CapturePolicy& policy = session_.capturePolicy(); policy.auditing()) {
    // How often the rotation ran, how often its budget held it back, and the regimes each key met
    // and when each was judged: the report's coverage.
    CapturePolicy::RotationCounts r = policy.rotationCounts();
    session_.setCounters(
        {.audit_rotation =
             AuditRotation{.rotations = r.rotations, .held_back = r.held_back, .regime_changes = r.regime_changes},
         .audit_regimes = policy.regimes()});
  }
  if (!at_exit) return;
  // The writer thread is joined once it has written everything; one stuck on a file is left to
  // the process's end rather than hang the training's exit.
  if (writer_.waitIdle(kExitWait)) writer_.stop();
  else logOnce("capture exit", "captures still being written at exit were abandoned after 120 s");
}

void Captures::describe(const CallRecord& rec, const RoleTensors& tensors, const CallArgs& args,
                        store::CaptureFile& file) {
  auto& meta = file.metadata;
  CallHealth health = classify(rec);
  meta["format"] = store::kCaptureFormat;
  meta["call"] = callName(rec);
  meta["rank"] = std::to_string(rec.rank);
  meta["seq"] = std::to_string(rec.seq);
  meta["step"] = std::to_string(rec.step);
  meta["phase"] = phaseName(rec.phase);
  meta["op"] = rec.op;
  meta["backend"] = rec.backend;
  meta["module"] = rec.module;
  meta["device"] = rec.device.name();
  meta["edge"] = edgeKindName(health.kind);
  std::string bad;
  for (const std::string& role : health.nonfinite_outputs) bad += (bad.empty() ? "" : ",") + role;
  meta["nonfinite_outputs"] = bad;
  if (!rec.injected.empty()) meta["injected"] = rec.injected;
  for (auto& [key, value] : environmentOf(rec.device)) meta[key] = std::move(value);
  for (const auto& [role, t] : tensors) {
    auto copy = hostCopy(roleName(role), t);
    if (!copy) continue;
    meta[std::string("stride.") + roleName(role)] = listText(t.strides());
    file.tensors.push_back(std::move(*copy));
  }
  describeArgs(args, file);
}

void Captures::describeLayout(const RoleTensors& run_tensors, store::CaptureFile& file) {
  // Where each tensor sat in memory when the kernel read it: kernels pick vectorised loads by the
  // data pointer's alignment (EFFICIENT's misaligned reads with views at odd storage offsets,
  // pytorch#183484), so replay rebuilds both. From the run's own tensors even when an audit kept a
  // slice: the slice's copy sits wherever the allocator put it.
  for (const auto& [role, t] : run_tensors) {
    const std::string name = roleName(role);
    if (!file.metadata.count("stride." + name) || !t.defined() || !t.has_storage()) continue;
    file.metadata["offset." + name] = std::to_string(t.storage_offset());
    file.metadata["align." + name] = std::to_string(pointerAlignment(t.data_ptr()));
  }
}

std::map<std::string, std::string> environmentOf(const Device& device) {
  // The bootstrap's facts (run_facts.h) hold for every device of the process.
  std::map<std::string, std::string> meta = runFacts();
  if (const char* torch = std::getenv("NANPROV_BUILT_TORCH")) meta["torch"] = torch;
  if (device.isCpu()) return meta;
  const auto& cuda = at::detail::getCUDAHooks();
  meta["cuda_runtime"] = std::to_string(cuda.versionCUDART());
  meta["cudnn"] = std::to_string(cuda.versionCuDNN());
  describeDevice(device.index, meta);
  return meta;
}

}  // namespace nanprov::probes
