// nanprov-replay: the LibTorch half of `nanprov replay` (cli/replay_command.cpp checks the
// arguments and the capture, then runs this). Its flags are defined once, in
// replay/engine_request.h, with what each --output prints.
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/util/Exception.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <optional>

#include "base/crash_backtrace.h"
#include "base/exit_codes.h"
#include "base/json_text.h"
#include "base/numbers.h"
#include "base/records/call_record.h"
#include "base/text.h"
#include "kernels/health_check.h"
#include "replay/backend_kernels.h"
#include "replay/backend_names.h"
#include "replay/backend_reruns.h"
#include "replay/backends.h"
#include "replay/captured_call.h"
#include "replay/engine_request.h"
#include "replay/flash_rerun.h"
#include "replay/judge.h"
#include "replay/memory_estimate.h"
#include "replay/packed_layouts.h"
#include "replay/progress.h"
#include "replay/replay_result.h"
#include "replay/repro_script.h"
#include "replay/tensor_measures.h"
#include "store/audit_file.h"
#include "store/capture_file.h"
#include "store/file_replace.h"
#include "store/replay_verdicts.h"
#include "store/replayed_kernels.h"

namespace nanprov::replay {
namespace {

std::string nonfiniteText(const std::string& role, const at::Tensor& t) {
  int64_t n = (~at::isfinite(t)).sum().item<int64_t>();
  return n ? role + " has " + std::to_string(n) + " non-finite values" : "";
}

// Rule 1: the inputs and G must be finite at valid positions (LSE is -inf for a row that sees
// no key, and a mask may hold -inf).
std::string referenceProblem(const CapturedCall& call, const Outputs& g) {
  for (const char* role : {"Q", "K", "V", "dO"}) {
    if (!call.has(role)) continue;
    if (std::string p = nonfiniteText(role, call.at(role)); !p.empty()) return p;
  }
  if (call.has("mask") && call.at("mask").is_floating_point() && at::isnan(call.at("mask")).any().item<bool>()) {
    return "the mask holds NaN";
  }
  for (const char* role : {"O", "dQ", "dK", "dV"}) {
    if (!g.of(role).defined()) continue;
    if (std::string p = nonfiniteText(std::string("the reference ") + role, g.of(role)); !p.empty()) return p;
  }
  if ((at::isnan(g.lse) | at::isposinf(g.lse)).any().item<bool>()) return "the reference LSE is NaN or +Inf";
  return "";
}

// A sliding window that lives in a bool mask (HF Gemma's sliding layers): every row sees one
// contiguous band of keys of a fixed reach, narrower than the keys. "64 (from the mask), causal"
// for a band that ends at the row's diagonal; "-32/+32 (from the mask)" for a two-sided one;
// "none" otherwise. Read from the mask's first (batch, head) slice.
std::string windowOf(const at::Tensor& visible) {
  at::Tensor v = visible;
  while (v.dim() > 2) v = v.select(0, 0);
  v = v.to(at::kCPU);
  const int64_t s_q = v.size(0), s_kv = v.size(1);
  if (s_q == 0 || s_kv == 0) return "none";
  at::Tensor cols = at::arange(s_kv, at::TensorOptions().dtype(at::kLong)).expand({s_q, s_kv});
  at::Tensor rows = at::arange(s_q, at::TensorOptions().dtype(at::kLong)) + (s_kv - s_q);  // bottom-right diagonal
  at::Tensor seen = v.any(-1);
  if (!seen.any().item<bool>()) return "none";
  at::Tensor lo = at::where(v, cols, s_kv).amin(-1), hi = at::where(v, cols, -1).amax(-1), count = v.sum(-1);
  if (!((count == hi - lo + 1) | ~seen).all().item<bool>()) return "none";  // not one band per row
  const int64_t before = (rows - lo).masked_select(seen).max().item<int64_t>();
  const int64_t after = (hi - rows).masked_select(seen).max().item<int64_t>();
  if (before + after + 1 >= s_kv) return "none";  // every row may see every key: no window
  at::Tensor want_lo = (rows - before).clamp_min(0), want_hi = (rows + after).clamp_max(s_kv - 1);
  if (!(((lo == want_lo) & (hi == want_hi)) | ~seen).all().item<bool>()) return "none";
  if (after == 0) return std::to_string(before + 1) + " (from the mask), causal";
  return "-" + std::to_string(before) + "/+" + std::to_string(after) + " (from the mask)";
}

Conditions conditionsOf(const CapturedCall& call, const Outputs& g) {
  Conditions c;
  // Where G is, at the mask's own broadcast shape: a [B, H, S, S] bool on the host took a third
  // of a second for a big call. Each row then counts once per (batch, head) it stands for.
  const at::TensorOptions bools = at::TensorOptions().dtype(at::kBool).device(g.lse.device());
  at::Tensor visible = at::ones({1, 1, call.s_q, call.s_kv}, bools);
  if (call.has("mask")) {
    const at::Tensor m = call.at("mask").to(g.lse.device());
    visible = visible & (m.scalar_type() == at::kBool ? m : m.to(at::kDouble) > kernels::kHiddenBias);
    c.mask_dtype = dtypeName(m);
  }
  if (call.causal) visible = visible & at::ones({call.s_q, call.s_kv}, bools).tril();
  if (call.has("mask")) c.window = windowOf(visible);
  at::Tensor hidden_rows = ~visible.any(-1);
  const int64_t stands_for = hidden_rows.numel() ? call.batch * call.q_heads * call.s_q / hidden_rows.numel() : 0;
  c.fully_masked_rows = hidden_rows.sum().item<int64_t>() * stands_for;
  at::Tensor lse = g.lse.masked_select(at::isfinite(g.lse));
  if (lse.numel()) {
    c.min_row_lse = lse.min().item<double>();
    // A low-LSE row (all its scores far below 0, as large negative biases make) is the condition;
    // an LSE beyond float32's range only echoes logits that overflowed, which is another story.
    c.lse_below_limit = *c.min_row_lse < kLseLimit && *c.min_row_lse > -std::numeric_limits<float>::max();
  }
  c.s_q = call.s_q;
  c.s_kv = call.s_kv;
  c.head_dim = call.head_dim;
  c.q_heads = call.q_heads;
  c.kv_heads = call.kv_heads;
  c.causal = call.causal;
  c.query_dtype = dtypeName(call.at("Q"));
  c.dropout_p = call.dropout_p;
  c.dropout_recorded = call.dropout_recorded;
  return c;
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    if (end > begin) out.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  return out;
}

Status emitRepro(const std::string& dir, const store::CaptureFile& file, const CapturedCall& call,
                 const ReplayResult& r) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::Error("cannot create " + dir + ": " + ec.message());
  store::CaptureFile inputs;
  inputs.metadata = {{"call", r.call}, {"note", "inputs of a call nanprov captured; see repro.py"}};
  // The call as replayed ([batch, heads, seq, dim], packed sequences unpacked): what the script runs.
  for (const char* role : {"Q", "K", "V", "mask", "dO"}) {
    if (call.has(role)) inputs.tensors.push_back(toCaptureTensor(role, call.at(role)));
  }
  NANPROV_RETURN_IF_ERROR(store::writeCapture((fs::path(dir) / kReproInputs).string(), inputs));
  ReproSpec spec;
  spec.call = r.call;
  spec.root_cause = causeName(r.root_cause.cls);
  spec.finding = "root cause " + std::string(causeName(r.root_cause.cls)) +
                 (r.root_cause.explanation.empty() ? "" : ": " + r.root_cause.explanation);
  spec.backend = r.root_cause.backend.empty() ? r.backend : r.root_cause.backend;
  if (spec.backend == "flash_cpu" || r.replayed_on == "cpu") spec.device = "cpu";
  else spec.device = "cuda";
  spec.causal = call.causal;
  spec.scale = call.scale;
  spec.gqa = call.q_heads != call.kv_heads;
  spec.versions = "torch " + call.metaOr("torch", "?") +
                  (r.captured_on == "cpu" ? ""
                                          : ", CUDA runtime " + call.metaOr("cuda_runtime", "?") + ", cuDNN " +
                                                call.metaOr("cudnn", "?") + ", " + call.metaOr("gpu", "?"));
  std::ofstream script(fs::path(dir) / kReproScript);
  script << reproScript(spec);
  if (!script.flush()) return Status::Error("cannot write " + (fs::path(dir) / kReproScript).string());
  return Status::Ok();
}

// Torch warns "Attempting to run cuBLAS, but there was no current CUDA context!" when autograd's
// device thread, which never made the primary context current, runs the first GEMM of a
// backward. It then sets the context itself, so the warning is noise in every CUDA replay.
// Autograd replays its threads' warnings on the caller's thread, through this handler.
class QuietCublasContextWarning : public c10::WarningHandler {
 public:
  void process(const c10::Warning& warning) override {
    if (warning.msg().find("no current CUDA context") != std::string::npos) return;
    c10::WarningHandler::process(warning);
  }
};

// Runs one backend on the call with its kernels traced as run number `index`; nullopt when the
// backend refused the call or failed, which run.detail then says.
std::optional<Outputs> runTraced(BackendRun& run, const CapturedCall& call, const at::Device& device,
                                 BackendKernelTrace& trace, int index) {
  if (std::string why = refusal(run.name, call, device); !why.empty()) {
    run.detail = why;
    return std::nullopt;
  }
  trace.attributeTo(index);
  auto outputs = runBackend(run.name, call, device);
  if (!outputs.ok()) {
    run.detail = outputs.status().message();
    return std::nullopt;
  }
  run.ran = true;
  return std::move(*outputs);
}

// Reruns a FlashAttention or FFPA call through its own package (replay/flash_rerun.h); nullopt when it
// cannot run here, which run.detail then says. Its kernels run in the helper's process, untraced.
std::optional<Outputs> runFlashPackage(BackendRun& run, const store::CaptureFile& file, const std::string& capture,
                                       const std::string& captured_backend, const at::Device& device) {
  if (run.name != captured_backend) {
    run.detail = run.name + " reruns only calls that ran it (this call ran " + captured_backend + ")";
    return std::nullopt;
  }
  auto outputs = rerunThroughPackage(file, capture, device);
  if (!outputs.ok()) {
    run.detail = outputs.status().message();
    return std::nullopt;
  }
  run.ran = true;
  return std::move(*outputs);
}

// Fills backends[].kernels from the trace. When the run did not trace the captured call, its
// kernel is named from its own backend's replay, and those kernels are kept next to the capture
// for `nanprov report`, provided this GPU is the model the call was captured on.
bool recordKernels(BackendKernelTrace& trace, const CapturedCall& call, const std::string& capture, ReplayResult& r) {
  Phase phase = call.backward ? Phase::kBackward : Phase::kForward;
  r.main_kernel = r.main_kernel.empty() ? "" : shortKernelName(r.main_kernel);
  if (!r.main_kernel.empty()) r.kernels_from = "run";
  if (!trace.unavailable().empty()) {
    if (r.replayed_on != "cpu") r.kernel_tracing = trace.unavailable();
    return false;
  }
  if (trace.onCpu()) {
    // The kernel is the ATen op each backend ran; nothing to keep for the report, which names
    // a CPU call's op from the store.
    for (size_t i = 0; i < r.backends.size(); ++i) {
      for (const KernelRecord& k : trace.kernelsOf(static_cast<int>(i), phase)) {
        r.backends[i].kernels.push_back({.name = k.name, .short_name = k.name, .duration_ns = 0, .main = true});
      }
    }
    return false;
  }
  std::vector<KernelRecord> original;
  for (size_t i = 0; i < r.backends.size(); ++i) {
    std::vector<KernelRecord> traced = trace.kernelsOf(static_cast<int>(i), phase);
    CallKernels pointers;
    for (const KernelRecord& k : traced) pointers.push_back(&k);
    const KernelRecord* main = mainKernel(pointers);
    for (const KernelRecord& k : traced) {
      r.backends[i].kernels.push_back({.name = k.name,
                                       .short_name = shortKernelName(k.name),
                                       .duration_ns = k.end_ns - k.start_ns,
                                       .main = &k == main});
    }
    if (r.backends[i].original) original = std::move(traced);
  }
  if (original.empty()) return false;
  if (r.main_kernel.empty()) {
    for (const BackendRun& b : r.backends) {
      if (b.original) r.main_kernel = b.mainKernel();
    }
    r.kernels_from = "replay";
  }
  std::string here = gpuModel(), captured_on = call.metaOr("gpu");
  if (here.empty() || here != captured_on) {
    r.notes.push_back("captured on " + (captured_on.empty() ? std::string("an unknown GPU") : captured_on) +
                      ", replayed on " + here + ": the kernels traced here are not kept for nanprov report");
    return false;
  }
  store::ReplayedKernels kept{
      .gpu = here, .backend = r.backend, .phase = phaseName(phase), .kernels = std::move(original)};
  Status written = store::writeReplayedKernels(capture, kept);
  if (!written.ok()) r.notes.push_back("kernels not kept: " + written.message());
  return written.ok();
}

// What the training process's own reruns of the call found when it captured it (probes/libtorch/
// call_rerun.h), read strictly: a count out of range is left out, never bent into a number.
std::optional<DeviceReruns> rerunsInRun(const CapturedCall& call) {
  auto count = [&](const char* key) { return parseInteger(call.metaOr(key), 0, kMaxReruns); };
  const auto runs = count("reruns.runs"), reproduced = count("reruns.reproduced"),
             identical = count("reruns.identical"), distinct = count("reruns.distinct");
  if (!runs || !reproduced || !identical || !distinct || *reproduced > *runs || *identical > *runs ||
      *distinct > *runs) {
    return std::nullopt;
  }
  const std::string gpu = call.metaOr("gpu");
  return DeviceReruns{.device = call.metaOr("device", "?") + (gpu.empty() ? "" : " (" + gpu + ")") + ", in the run",
                      .runs = static_cast<int>(*runs),
                      .reproduced = static_cast<int>(*reproduced),
                      .identical_to_run = static_cast<int>(*identical),
                      .distinct = static_cast<int>(*distinct)};
}

int fail(const Status& st) {
  std::fprintf(stderr, "nanprov replay: %s\n", printable(st.message()).c_str());  // it names files: one line
  return kInputError;
}

using Output = EngineOutput;

// The kernels mode: replays the captured backend alone, to name the kernels of a call the run's
// trace window missed. Prints one line; exit 0 when they were kept for the report.
int keepKernels(const CapturedCall& call, const std::string& capture, const at::Device& device, ReplayResult& r) {
  BackendKernelTrace trace(device);
  BackendRun run{.name = r.backend, .original = true};
  runTraced(run, call, device, trace, 0);
  r.backends.push_back(run);
  r.main_kernel.clear();  // what the run traced is not the question here
  bool kept = recordKernels(trace, call, capture, r);
  std::string why = !run.ran                    ? run.detail
                    : !r.kernel_tracing.empty() ? r.kernel_tracing
                    : r.notes.empty()           ? "no kernel was traced"
                                                : r.notes.back();
  std::fprintf(stderr, "nanprov: %s\n",
               kept ? (r.call + " ran " + r.main_kernel + " (traced in a replay of its capture)").c_str()
                    : ("the kernels of " + r.call + " are unknown: " + why).c_str());
  return kept ? kClean : kEdgeFound;
}

// The audit's judgement, kept next to the capture for `nanprov report`, and printed: one line,
// or the JSON kept. Exit 0 when the run's outputs are ok, 1 for a finding, 3 when not judged.
int keepAudit(const ReplayResult& r, const nlohmann::json& doc, Output output, std::string* printed) {
  if (Status st = store::writeAuditFile(r.capture, doc); !st.ok()) return fail(st);
  *printed += output == Output::kAuditJson ? jsonText(doc, 2) + "\n"
              : doc["audited"]
                  ? auditText(r) + "\n"
                  : "audit " + r.call + ": not audited, " + doc["not_audited_why"].get<std::string>() + "\n";
  return !doc["audited"] ? kInputError : doc["finding"] ? kEdgeFound : kClean;
}

// Why a replay on the CPU would not fit in the memory allowed (NANPROV_REPLAY_MAX_MEMORY, set by
// nanprov replay --max-memory), worked out from the shapes before anything is allocated; "" when
// it fits or runs on a GPU.
std::string memoryRefusal(const CapturedCall& call, const at::Device& device, const std::vector<std::string>& backends,
                          bool audit) {
  if (!device.is_cpu()) return "";
  CallShape shape{.batch = call.batch,
                  .q_heads = call.q_heads,
                  .kv_heads = call.kv_heads,
                  .s_q = call.s_q,
                  .s_kv = call.s_kv,
                  .head_dim = call.head_dim,
                  .v_dim = call.v_dim,
                  .element_bytes = static_cast<int64_t>(call.at("Q").element_size()),
                  .backward = call.backward};
  for (const auto& [role, t] : call.tensors) shape.input_bytes += static_cast<int64_t>(t.nbytes());
  MemoryNeed need = replayMemory(shape, backends, audit);
  const char* given = std::getenv("NANPROV_REPLAY_MAX_MEMORY");
  const std::optional<int64_t> asked = given ? parseInteger(given, 1, INT64_MAX) : std::nullopt;
  const int64_t budget = asked ? *asked : defaultReplayBudget();
  if (need.bytes <= budget) return "";
  return "replaying it needs about " + gigabytes(need.bytes) + " of memory (largest: " + need.largest +
         "), more than the " + gigabytes(budget) +
         " allowed (nanprov replay --max-memory; default three quarters of the memory available)";
}

// Replays (or audits) the capture at `path`; what it has to say is appended to *printed.
int replayMain(const std::string& path, std::string device_name, const std::string& backend_list, Output output,
               const std::string& emit_dir, bool keep, int reruns, std::string* printed) {
  const auto started = std::chrono::steady_clock::now();
  const bool audit = output == Output::kAudit || output == Output::kAuditJson;
  QuietCublasContextWarning quiet;
  c10::WarningUtils::WarningHandlerGuard quiet_guard(&quiet);
  Progress progress;
  progress.stage("loading the capture");
  auto file = store::readCapture(path);
  if (!file.ok()) return fail(file.status());
  auto call = toCapturedCall(*file, path);
  if (!call.ok() && audit) {
    ReplayResult unread;
    unread.capture = path;
    auto meta = [&](const char* key) { return file->metadata.count(key) ? file->metadata.at(key) : std::string("?"); };
    unread.call = meta("call"), unread.step = meta("step"), unread.phase = meta("phase"), unread.op = meta("op");
    unread.backend = meta("backend");
    return keepAudit(unread, notAuditedJson(unread, call.status().message()), output, printed);
  }
  if (!call.ok()) return fail(call.status());

  ReplayResult r;
  std::string captured_on = call->metaOr("device", "cpu");
  if (device_name == "auto") device_name = captured_on.rfind("cuda", 0) == 0 && at::hasCUDA() ? "cuda" : "cpu";
  if (device_name == "cuda" && !at::hasCUDA()) {
    return fail(Status::Error("no CUDA device here (or this torch has no CUDA); replay with --device cpu"));
  }
  if (device_name == "cpu" && captured_on != "cpu") {
    r.notes.push_back("captured on " + captured_on + ", replayed on the CPU: the CUDA backends are not judged here");
  }
  at::Device device(device_name == "cuda" ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU));
  std::vector<std::string> backends = backend_list.empty() ? defaultBackends(device) : lines(backend_list);

  r.capture = path;
  r.call = call->metaOr("call", "?");
  r.phase = call->metaOr("phase", "?");
  r.op = call->metaOr("op", "?");
  r.note = call->metaOr("replay.note");
  r.layouts = call->layouts;
  r.incomplete = call->incomplete;
  r.backend = call->metaOr("backend", "?");
  // A call that ran a plain softmax (nn.MultiheadAttention's need_weights path, HF eager) is
  // rerun as it ran, beside the SDPA backends.
  // FlashAttention 2/3/4 and FFPA calls too, through their own package where it imports.
  if (backend_list.empty() && (r.backend == "plain_softmax" || rerunsThroughItsPackage(r.backend))) {
    backends.push_back(r.backend);
  }
  r.module = call->metaOr("module");
  r.step = call->metaOr("step", "?");
  r.slice = call->metaOr("slice");
  r.captured_on = captured_on;
  r.replayed_on = device.str();
  r.dtype = dtypeName(call->at("Q"));
  r.injected = call->metaOr("injected");
  r.captured_edge = call->metaOr("edge");
  r.kernels = lines(call->metaOr("kernels"));
  r.main_kernel = call->metaOr("kernel.main", r.kernels.size() == 1 ? r.kernels[0] : "");
  r.layout = call->metaOr("arg.layout");
  if (std::string change = call->metaOr("audit.regime_change"); !change.empty()) {
    r.notes.push_back("the audit judged this call because its conditions changed: " + change);
  }
  r.flex_backend = call->metaOr("arg.kernel_backend");
  for (const char* key :
       {"torch", "cudnn", "gpu", "cuda_build", "cudnn_loaded", "cudnn_library", "triton", "ptxas", "flash_attn_4"}) {
    if (std::string value = call->metaOr(key); !value.empty()) r.environment[key] = value;
  }

  if (output == Output::kKernels) return keepKernels(*call, path, device, r);
  if (std::string why = memoryRefusal(*call, device, backends, audit); !why.empty()) {
    if (audit) return keepAudit(r, notAuditedJson(r, why), output, printed);
    return fail(Status::Error(r.call + ": " + why));
  }
  if (audit && !call->incomplete.empty()) {
    return keepAudit(r, notAuditedJson(r, "the reference cannot rebuild the call: " + call->incomplete), output,
                     printed);
  }

  progress.stage("float64 reference");
  auto g = runReference(*call, device.is_cuda(), &r.reference_device);
  if (!g.ok()) return fail(g.status());
  zeroPadding(*call, *g);
  r.reference_problem = referenceProblem(*call, *g);
  progress.stage("yardstick");
  Outputs l = runYardstick(*call, device);
  zeroPadding(*call, l);
  Outputs flash_ordered = runFlashOrderedYardstick(*call, g->o, device);
  zeroPadding(*call, flash_ordered);
  progress.stage("preparing the comparison");
  Judge judge(*g, {&l, &flash_ordered});
  r.yardstick_nonfinite = judge.yardstickNonfinite();
  auto judged = [&](BackendRun run, Outputs outputs) {
    progress.stage("comparing " + run.name);
    zeroPadding(*call, outputs);
    run.tensors = judge.compareWith(outputs);
    if (!r.reference_problem.empty()) {
      for (Comparison& c : run.tensors) c.verdict = Verdict::kReferenceInvalid;
    }
    return run;
  };
  r.captured = judged(BackendRun{.name = "captured", .ran = true}, capturedOutputs(*call));
  if (audit) {
    // A backward computes from the O and LSE its forward saved: when those were already wrong,
    // the fault is upstream of this call, and the finding says so.
    if (call->backward) r.received = judged(BackendRun{.name = "received", .ran = true}, forwardOutputsIn(*call));
    r.conditions = conditionsOf(*call, *g);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    return keepAudit(r, auditJson(r, seconds), output, printed);
  }
  BackendKernelTrace trace(device);
  Outputs original_outputs;  // the captured backend's first run, as it gave them: its first rerun
  for (const std::string& name : backends) {
    BackendRun run{.name = name, .original = name == r.backend};
    progress.stage(name);
    std::optional<Outputs> outputs = rerunsThroughItsPackage(name)
                                         ? runFlashPackage(run, *file, path, r.backend, device)
                                         : runTraced(run, *call, device, trace, static_cast<int>(r.backends.size()));
    if (outputs && run.original) original_outputs = *outputs;
    r.backends.push_back(outputs ? judged(run, *outputs) : run);
  }
  // Untraced: the kernels named are the first runs'.
  trace.attributeTo(-1);
  r.reruns =
      rerunBackends({.call = &*call,
                     .device = device,
                     .runs = reruns,
                     .captured = &*r.captured,
                     .captured_outputs = capturedOutputs(*call)},
                    r.backends, original_outputs, judged, [&](const std::string& what) { progress.stage(what); });
  original_outputs = Outputs{};
  if (r.reruns->backend.empty()) r.reruns->backend = r.backend;
  r.reruns->in_run_not_rerun = call->metaOr("reruns.not_rerun");
  r.reruns->in_run = rerunsInRun(*call);
  if (r.reruns->dependsOnDevice()) {
    std::string always, never;
    for (const DeviceReruns& d : r.reruns->devices) {
      if (d.runs > 0 && d.reproduced == d.runs) always += (always.empty() ? "" : ", ") + d.device;
      if (d.runs > 0 && d.reproduced == 0) never += (never.empty() ? "" : ", ") + d.device;
    }
    r.notes.push_back("the result depends on the device: every rerun on " + always +
                      " gave the run's result, none on " + never);
  }
  progress.stage("conditions and root cause");
  recordKernels(trace, *call, path, r);
  r.conditions = conditionsOf(*call, *g);
  r.root_cause = findRootCause(r);
  if (!emit_dir.empty()) {
    if (Status st = emitRepro(emit_dir, *file, *call, r); !st.ok()) return fail(st);
    r.notes.push_back("wrote " + emit_dir + "/" + kReproScript + " and " + kReproInputs + ": python " + emit_dir + "/" +
                      kReproScript + " reruns it with plain PyTorch");
  }
  if (keep) {
    const std::string kept = store::replayVerdictsPath(path);
    Status written =
        store::replaceFile(kept, "replay verdicts", [&](std::ostream& out) { out << jsonText(toJson(r), 2) << "\n"; });
    r.notes.push_back(written.ok() ? "kept the verdicts in " + kept + ", where nanprov report --html shows them"
                                   : "verdicts not kept: " + written.message());
  }
  *printed += output == Output::kJson ? jsonText(toJson(r), 2) + "\n" : toText(r);
  return exitCodeOf(r.root_cause);
}

// The audit's judge for the length of a run (`nanprov run --audit`, cli/auditor.cpp): reads one
// capture path per line on stdin and answers each with one line, "<exit code>\t<nanoseconds it
// took>\t<what audit mode printed, newlines as spaces>", so LibTorch loads once per run, not once
// per call (the time excludes that load: it is the audit's steady-state cost). Judging yields the
// CPU to the training (nice 10).
int serveAudits(const std::string& device) {
  setpriority(PRIO_PROCESS, 0, 10);
  std::string path;
  while (std::getline(std::cin, path)) {
    std::string printed;
    int code = kInputError;
    const auto started = std::chrono::steady_clock::now();
    try {
      code = replayMain(path, device, "", Output::kAudit, "", false, 1, &printed);
    } catch (const std::exception& e) {
      printed = "replay failed: " + firstLine(e.what());  // c10 appends its stack trace after a newline
    }
    const auto took = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - started);
    while (!printed.empty() && printed.back() == '\n') printed.pop_back();
    for (char& c : printed) c = c == '\n' || c == '\t' ? ' ' : c;
    // Flushed: the auditor waits for it.
    std::cout << code << '\t' << took.count() << '\t' << printed << std::endl;
  }
  return 0;
}

}  // namespace
}  // namespace nanprov::replay

int main(int argc, char** argv) {
  nanprov::printBacktraceOnCrash();
  using nanprov::replay::EngineOutput;
  nanprov::replay::EngineRequest request;
  std::string output = "text";
  CLI::App app{
      "nanprov-replay: the replay engine that `nanprov replay` and `nanprov run` start; "
      "see nanprov replay --help"};
  app.add_option("--capture", request.capture, "a .safetensors capture (not with audit-serve)");
  app.add_option("--device", request.device, "auto, cpu or cuda")->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app.add_option("--backends", request.backends, "comma list of backends; default: all");
  app.add_option("--output", output, nanprov::replay::engineOutputNames());
  app.add_option("--emit-repro", request.emit_repro, "folder for repro.py and its inputs");
  app.add_flag("--keep", request.keep, "also keep the verdicts next to the capture (X.replay.json)");
  app.add_option("--reruns", request.reruns, "how often the captured backend runs the call in all")
      ->check(CLI::Range(1, nanprov::replay::kMaxReruns));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? nanprov::kClean : nanprov::kUsageError;
  }
  auto named = nanprov::replay::engineOutputNamed(output);
  if (!named) {
    std::fprintf(stderr, "nanprov-replay: --output must be one of %s, not '%s'\n",
                 nanprov::replay::engineOutputNames().c_str(), output.c_str());
    return nanprov::kUsageError;
  }
  if (*named != EngineOutput::kAuditServe && request.capture.empty()) {
    std::fprintf(stderr,
                 "nanprov-replay: --capture is required; it is run by `nanprov replay` (see nanprov replay --help)\n");
    return nanprov::kUsageError;
  }
  std::string backends = request.backends;
  for (char& c : backends) c = c == ',' ? '\n' : c;
  try {
    if (*named == EngineOutput::kAuditServe) return nanprov::replay::serveAudits(request.device);
    std::string printed;
    int code = nanprov::replay::replayMain(request.capture, request.device, backends, *named, request.emit_repro,
                                           request.keep, request.reruns, &printed);
    std::fwrite(printed.data(), 1, printed.size(), stdout);
    return code;
  } catch (const std::exception& e) {
    // One line: c10 appends its stack trace after a newline (an allocation that failed inside LibTorch).
    std::fprintf(stderr, "nanprov replay: replay failed: %s\n",
                 nanprov::printable(nanprov::firstLine(e.what())).c_str());
    return nanprov::kInputError;
  }
}
