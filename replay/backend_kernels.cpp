#include "replay/backend_kernels.h"

#include <ATen/record_function.h>

#include <atomic>
#include <map>
#include <mutex>
#include <string_view>

#include "tracer/kernel_tracer.h"
#ifdef NANPROV_HAVE_CUDA
#include "kernels/health_check_queue.h"
#endif

namespace nanprov::replay {
namespace {

// The replay engine's tracer: one per process (CUPTI serves one client), kept until it exits.
KernelTracer& engineTracer() {
  static KernelTracer* tracer = KernelTracer::create().release();
  return *tracer;
}

std::atomic<int> g_run{-1};

// The tracer's call number of run `run`'s ops of one phase.
int64_t callOf(int run, Phase phase) { return int64_t{run} * 2 + (phase == Phase::kBackward ? 1 : 0); }

// The ops replay runs (aten::_scaled_dot_product_cudnn_attention, ..._backward,
// _flash_attention_forward...) and the ones they call: every ATen op named for attention. The
// MATH backend's backward is decomposed into generic ops and has none.
bool isAttentionOp(std::string_view name) {
  return name.rfind("aten::", 0) == 0 && name.find("attention") != std::string_view::npos;
}

Phase phaseOf(std::string_view name) {
  constexpr std::string_view kBackward = "_backward";
  bool backward = name.size() > kBackward.size() && name.substr(name.size() - kBackward.size()) == kBackward;
  return backward ? Phase::kBackward : Phase::kForward;
}

// Marks an op whose kernels are traced, so its end pops what its start pushed.
struct Traced : at::ObserverContext {};

// On the CPU the kernel is the ATen op itself (DESIGN.md): the outermost attention op of each
// run and phase, recorded by name.
std::mutex g_cpu_mu;
std::map<int64_t, std::string>* g_cpu_ops = nullptr;
thread_local int t_cpu_depth = 0;

struct CpuOp : at::ObserverContext {};

std::unique_ptr<at::ObserverContext> onCpuOpStart(const at::RecordFunction& fn) {
  int run = g_run.load();
  std::string_view name = fn.name();
  if (run < 0 || !isAttentionOp(name)) return nullptr;
  if (t_cpu_depth++ == 0) {
    std::lock_guard<std::mutex> lock(g_cpu_mu);
    if (g_cpu_ops) g_cpu_ops->emplace(callOf(run, phaseOf(name)), std::string(name));
  }
  return std::make_unique<CpuOp>();
}

void onCpuOpEnd(const at::RecordFunction&, at::ObserverContext* entered) {
  if (entered) --t_cpu_depth;
}

std::unique_ptr<at::ObserverContext> onOpStart(const at::RecordFunction& fn) {
  int run = g_run.load();
  std::string_view name = fn.name();
  if (run < 0 || !isAttentionOp(name)) return nullptr;
  KernelTracer& tracer = engineTracer();
  if (!tracer.enter(callOf(run, phaseOf(name)), std::string(name))) {
    tracer.exit();  // enter() pushed its NVTX range even when it did not trace
    return nullptr;
  }
  return std::make_unique<Traced>();
}

void onOpEnd(const at::RecordFunction&, at::ObserverContext* entered) {
  if (entered) engineTracer().exit();
}

}  // namespace

BackendKernelTrace::BackendKernelTrace(const at::Device& device) {
  if (!device.is_cuda()) {
    on_cpu_ = true;
    {
      std::lock_guard<std::mutex> lock(g_cpu_mu);
      g_cpu_ops = &cpu_ops_;
    }
    at::RecordFunctionCallback callback(&onCpuOpStart, &onCpuOpEnd);
    callback.scopes({at::RecordScope::FUNCTION});
    callback_ = at::addGlobalCallback(callback);
    return;
  }
  if (Status st = engineTracer().start(); !st.ok()) {
    unavailable_ = st.message();
    return;
  }
  at::RecordFunctionCallback callback(&onOpStart, &onOpEnd);
  callback.scopes({at::RecordScope::FUNCTION});
  callback_ = at::addGlobalCallback(callback);
}

BackendKernelTrace::~BackendKernelTrace() {
  g_run = -1;
  if (callback_) at::removeCallback(callback_);
  std::lock_guard<std::mutex> lock(g_cpu_mu);
  if (g_cpu_ops == &cpu_ops_) g_cpu_ops = nullptr;
}

void BackendKernelTrace::attributeTo(int run) { g_run = run; }

std::vector<KernelRecord> BackendKernelTrace::kernelsOf(int run, Phase phase) {
  if (on_cpu_) {
    g_run = -1;
    std::lock_guard<std::mutex> lock(g_cpu_mu);
    auto op = cpu_ops_.find(callOf(run, phase));
    if (op == cpu_ops_.end()) return {};
    KernelRecord k;
    k.name = op->second;
    return {k};
  }
  if (!unavailable_.empty()) return {};
  if (!collected_) {
    g_run = -1;
    for (KernelRecord& k : engineTracer().collect(/*at_exit=*/true)) by_call_[k.seq].push_back(std::move(k));
    collected_ = true;
  }
  auto it = by_call_.find(callOf(run, phase));
  return it == by_call_.end() ? std::vector<KernelRecord>{} : it->second;
}

std::string gpuModel(int index) {
#ifdef NANPROV_HAVE_CUDA
  return at::hasCUDA() ? kernels::deviceDescription(index) : "";
#else
  (void)index;
  return "";
#endif
}

}  // namespace nanprov::replay
