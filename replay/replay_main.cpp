// nanprov-replay: the LibTorch half of `nanprov replay` (cli/replay_command.cpp checks the
// arguments and the capture, then runs this). Usage, fixed by the CLI:
//   nanprov-replay CAPTURE DEVICE(auto|cpu|cuda) BACKENDS(comma list or "") JSON(0|1) EMIT_DIR("" for none)
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/util/Exception.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>

#include "base/json_text.h"
#include "replay/backends.h"
#include "replay/captured_call.h"
#include "replay/packed_layouts.h"
#include "replay/progress.h"
#include "replay/replay_result.h"
#include "replay/repro_script.h"
#include "store/call_record.h"
#include "store/capture_file.h"

namespace nanprov::replay {
namespace {

constexpr const char* kRoles[] = {"O", "LSE", "dQ", "dK", "dV"};
constexpr double kHiddenMask = -65504.0;  // at or below: a masked key (SDPA's cuDNN bool conversion)

Grid gridOf(const at::Tensor& g) {
  Grid grid;
  grid.batch = g.size(0);
  grid.heads = g.size(1);
  grid.rows = g.size(2);
  grid.cols = g.dim() == 4 ? g.size(3) : 1;
  return grid;
}

// 2·max|fl(G+0.3)−0.3−G| in `dtype`: about one unit in the last place near max|G|.
double floorOf(const at::Tensor& g, at::ScalarType dtype) {
  at::Tensor finite = g.masked_select(at::isfinite(g));
  if (finite.numel() == 0) return 0;
  at::Tensor rounded = (finite + 0.3).to(dtype).to(at::kDouble);
  return 2 * (rounded - 0.3 - finite).abs().max().item<double>();
}

std::vector<Comparison> compareAll(const Outputs& b, const Outputs& g, const Outputs& l) {
  std::vector<Comparison> out;
  for (const char* role : kRoles) {
    const at::Tensor &bt = b.of(role), &gt = g.of(role), &lt = l.of(role);
    if (!bt.defined() || !gt.defined() || bt.sizes() != gt.sizes()) continue;
    std::vector<double> lv = lt.defined() && lt.sizes() == gt.sizes() ? doubles(lt) : std::vector<double>{};
    out.push_back(compare(role, gridOf(gt), doubles(bt), doubles(gt), lv, floorOf(gt, bt.scalar_type())));
  }
  return out;
}

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

Conditions conditionsOf(const CapturedCall& call, const Outputs& g) {
  Conditions c;
  at::Tensor visible = at::ones({call.batch, call.q_heads, call.s_q, call.s_kv}, at::kBool);
  if (call.has("mask")) {
    const at::Tensor& m = call.at("mask");
    visible = visible & (m.scalar_type() == at::kBool ? m : m.to(at::kDouble) > kHiddenMask);
    c.mask_dtype = dtypeName(m);
  }
  if (call.causal) visible = visible & at::ones({call.s_q, call.s_kv}, at::kBool).tril();
  c.fully_masked_rows = (~visible.any(-1)).sum().item<int64_t>();
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

Status emitRepro(const std::string& dir, const CaptureFile& file, const CapturedCall& call, const ReplayResult& r) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::Error("cannot create " + dir + ": " + ec.message());
  CaptureFile inputs;
  inputs.metadata = {{"call", r.call}, {"note", "inputs of a call nanprov captured; see repro.py"}};
  // The call as replayed ([batch, heads, seq, dim], packed sequences unpacked): what the script runs.
  for (const char* role : {"Q", "K", "V", "mask", "dO"}) {
    if (call.has(role)) inputs.tensors.push_back(toCaptureTensor(role, call.at(role)));
  }
  NANPROV_RETURN_IF_ERROR(writeCapture((fs::path(dir) / kReproInputs).string(), inputs));
  ReproSpec spec;
  spec.call = r.call;
  spec.root_cause = r.root_cause.cls;
  spec.finding = "root cause " + r.root_cause.cls + (r.root_cause.explanation.empty() ? "" : ": " + r.root_cause.explanation);
  spec.backend = r.root_cause.backend.empty() ? r.backend : r.root_cause.backend;
  if (spec.backend == "flash_cpu" || r.replayed_on == "cpu") spec.device = "cpu";
  else spec.device = "cuda";
  spec.causal = call.causal;
  spec.scale = call.scale;
  spec.gqa = call.q_heads != call.kv_heads;
  spec.versions = "torch " + call.metaOr("torch", "?") +
                  (r.captured_on == "cpu" ? "" : ", CUDA runtime " + call.metaOr("cuda_runtime", "?") + ", cuDNN " +
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

int fail(const Status& st) {
  std::fprintf(stderr, "nanprov replay: %s\n", st.message().c_str());
  return 3;
}

int replayMain(const std::string& path, std::string device_name, const std::string& backend_list, bool json,
               const std::string& emit_dir) {
  QuietCublasContextWarning quiet;
  c10::WarningUtils::WarningHandlerGuard quiet_guard(&quiet);
  Progress progress;
  progress.stage("loading the capture");
  auto file = readCapture(path);
  if (!file.ok()) return fail(file.status());
  auto call = toCapturedCall(*file, path);
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
  r.incomplete = call->incomplete;
  r.backend = call->metaOr("backend", "?");
  r.module = call->metaOr("module");
  r.captured_on = captured_on;
  r.replayed_on = device.str();
  r.dtype = dtypeName(call->at("Q"));
  r.injected = call->metaOr("injected");
  r.captured_edge = call->metaOr("edge");
  r.kernels = lines(call->metaOr("kernels"));
  r.main_kernel = call->metaOr("kernel.main", r.kernels.size() == 1 ? r.kernels[0] : "");
  if (call->dropout_p > 0) {
    r.notes.push_back("the call used dropout " + std::to_string(call->dropout_p) +
                      "; the reference has none, so outputs are compared without it and differ by design");
  }

  progress.stage("float64 reference");
  auto g = runReference(*call, device.is_cuda(), &r.reference_device);
  if (!g.ok()) return fail(g.status());
  zeroPadding(*call, *g);
  r.reference_problem = referenceProblem(*call, *g);
  progress.stage("yardstick");
  Outputs l = runYardstick(*call, device);
  zeroPadding(*call, l);
  for (const Comparison& c : compareAll(l, *g, l)) {
    if (c.nonfinite > 0) r.yardstick_nonfinite.push_back(c.role);
  }
  auto judged = [&](BackendRun run, Outputs outputs) {
    progress.stage("comparing " + run.name);
    zeroPadding(*call, outputs);
    run.tensors = compareAll(outputs, *g, l);
    if (!r.reference_problem.empty()) {
      for (Comparison& c : run.tensors) c.verdict = Verdict::kReferenceInvalid;
    }
    return run;
  };
  r.captured = judged(BackendRun{.name = "captured", .ran = true}, capturedOutputs(*call));
  for (const std::string& name : backends) {
    BackendRun run{.name = name, .original = name == r.backend};
    if (std::string why = refusal(name, *call, device); !why.empty()) {
      run.detail = why;
      r.backends.push_back(run);
      continue;
    }
    progress.stage(name);
    auto outputs = runBackend(name, *call, device);
    if (!outputs.ok()) {
      run.detail = outputs.status().message();
      r.backends.push_back(run);
      continue;
    }
    run.ran = true;
    r.backends.push_back(judged(run, *outputs));
  }
  progress.stage("conditions and root cause");
  r.conditions = conditionsOf(*call, *g);
  r.main_kernel = r.main_kernel.empty() ? "" : shortKernelName(r.main_kernel);
  r.root_cause = findRootCause(r);
  if (!emit_dir.empty()) {
    if (Status st = emitRepro(emit_dir, *file, *call, r); !st.ok()) return fail(st);
    r.notes.push_back("wrote " + emit_dir + "/" + kReproScript + " and " + kReproInputs +
                      ": python " + emit_dir + "/" + kReproScript + " reruns it with plain PyTorch");
  }
  std::string out = json ? jsonText(toJson(r), 2) + "\n" : toText(r);
  std::fwrite(out.data(), 1, out.size(), stdout);
  return exitCodeOf(r.root_cause);
}

}  // namespace
}  // namespace nanprov::replay

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "nanprov-replay is run by `nanprov replay`; see nanprov replay --help\n");
    return 2;
  }
  std::string backends = argv[3];
  for (char& c : backends) c = c == ',' ? '\n' : c;
  try {
    return nanprov::replay::replayMain(argv[1], argv[2], backends, std::string(argv[4]) == "1", argv[5]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nanprov replay: replay failed: %s\n", e.what());
    return 3;
  }
}
