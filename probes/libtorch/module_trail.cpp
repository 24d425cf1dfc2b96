#include "probes/libtorch/module_trail.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>  // at::GradMode: torch 2.11's ATen.h does not bring it
#include <torch/csrc/autograd/graph_task.h>

#include <algorithm>
#include <limits>
#include <mutex>
#include <unordered_set>

#include "base/attention_like.h"
#include "base/log_once.h"
#include "base/text.h"
#include "base/wall_clock.h"
#include "probes/core/probe_cost.h"
#include "probes/core/session.h"
#include "probes/libtorch/tensor_health.h"

namespace nanprov::probes {
namespace {

// Rows stored per process: the first non-finite step's module calls, which after the first one
// are mostly the same values passing through. Enough to show the trail, bounded for a huge model.
constexpr size_t kMaxRows = 256;
// In-flight checks beyond this are not started: their results stopped coming back (a device
// that fails), and the table must not grow without bound.
constexpr size_t kMaxPending = 1 << 16;

bool checkable(const at::Tensor& t) {
  return t.defined() && t.is_floating_point() && t.has_storage() && !t.is_meta() && t.numel() > 0;
}

// An output that is one of the inputs itself: passed through (nn.Identity, dropout in eval), or
// changed in place (ReLU(inplace=True)), whose input is then read after the change. Either way the
// module cannot be judged on it: it is not counted as an output, and a module with no other output
// is not judged at all (the module around it is).
bool isAnInput(const at::Tensor& output, const std::vector<at::Tensor>& inputs) {
  for (const at::Tensor& i : inputs) {
    if (i.unsafeGetTensorImpl() == output.unsafeGetTensorImpl()) return true;
  }
  return false;
}

// The attention-like module calls open on this thread, innermost last: the module's number and
// how many attention calls had begun or been counted unchecked on the thread when it began.
// Bounded: a call that raised never leaves, and is dropped when an outer one does.
struct Entered {
  int64_t module = 0;
  int64_t attention_seen = 0;
};
thread_local std::vector<Entered> t_entered;
constexpr size_t kMaxEntered = 64;

int64_t attentionSeenOnThread() { return Session::callsBegunOnThread() + Session::unprobedCountedOnThread(); }

}  // namespace

void ModuleTrail::Tally::add(const MeasuredChecks::Counts& c) {
  nan += c.nan, posinf += c.posinf, neginf += c.neginf;
  largest = std::max(largest, c.max_abs);
}

bool ModuleTrail::name(int64_t id, const std::string& path, const std::string& module_class,
                       const std::string& unchecked_before) {
  if (id < 0 || id > (int64_t{1} << 24)) return false;
  std::string unchecked_attention;
  const bool attention = looksLikeAttention(path, module_class);
  if (attention) {
    // One kind per class and place, not per layer; the report reads the --probe-module after "; ".
    const std::string pattern = modulePattern(path);
    unchecked_attention =
        "attention-like module " + module_class + " at " + (pattern.empty() ? "the outermost module" : pattern) +
        " ran no attention op nanprov checks: not checked; --probe-module '" + module_class + "' checks it";
    // The report names the class of a place other probes counted unchecked by its path alone.
    session_.setCounters({.module_class = {{pattern, module_class}}});
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (names_.size() <= static_cast<size_t>(id)) names_.resize(static_cast<size_t>(id) + 1);
  names_[static_cast<size_t>(id)] = {path, module_class, splitList(unchecked_before, '\n'),
                                     std::move(unchecked_attention)};
  return attention;
}

void ModuleTrail::enter(int64_t id) {
  if (t_entered.size() >= kMaxEntered) t_entered.erase(t_entered.begin());
  t_entered.push_back({id, attentionSeenOnThread()});
}

void ModuleTrail::leave(int64_t id) {
  auto it = std::find_if(t_entered.rbegin(), t_entered.rend(), [id](const Entered& e) { return e.module == id; });
  if (it == t_entered.rend()) return;  // its first call: named after it began
  const int64_t before = it->attention_seen;
  t_entered.erase(std::prev(it.base()), t_entered.end());  // with the calls inside it that raised
  // A call begun, or one counted unchecked, inside it (that one is named where it ran). A
  // --probe-module's record comes from the module's own forward hook, which runs before this one.
  if (attentionSeenOnThread() != before) return;
  std::string what;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (static_cast<size_t>(id) < names_.size()) what = names_[static_cast<size_t>(id)].unchecked_attention;
  }
  if (!what.empty()) session_.countUnprobed(what);
}

ModuleTrail::Site ModuleTrail::site(int64_t module, Phase phase) {
  Site s{.module = module, .step = session_.identity().step(), .phase = phase, .time_ns = wallClockNs()};
  std::lock_guard<std::mutex> lock(mu_);
  s.order = next_order_++;
  return s;
}

void ModuleTrail::forward(int64_t id, const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs,
                          bool inputs_whole) {
  ProbeCost::Scope cost(ProbeStage::kTrail);
  std::vector<at::Tensor> outs;
  for (const at::Tensor& o : outputs) {
    if (checkable(o) && !isAnInput(o, inputs)) outs.push_back(o);
  }
  if (outs.empty()) return;
  std::vector<at::Tensor> ins;
  for (const at::Tensor& i : inputs) {
    if (checkable(i)) ins.push_back(i);
  }
  // A forward recomputed by activation checkpointing runs inside the backward: the original
  // forward was checked. Its backward is watched (with reentrant checkpointing it is the one
  // autograd runs).
  if (torch::autograd::get_current_graph_task_id() == -1) {
    std::vector<at::Tensor> tensors = ins;
    tensors.insert(tensors.end(), outs.begin(), outs.end());
    // Integer tensors (token ids) count as received, and finite.
    Site s = site(id, Phase::kForward);
    s.seen = !inputs_whole ? ModuleInputs::kPartlySeen : inputs.empty() ? ModuleInputs::kNone : ModuleInputs::kFinite;
    check(s, tensors, ins.size());
  }
  if (at::GradMode::is_enabled()) watchGradients(id, ins, outs);
}

void ModuleTrail::watchGradients(int64_t id, const std::vector<at::Tensor>& inputs,
                                 const std::vector<at::Tensor>& outputs) {
  std::vector<at::Tensor> sends;  // distinct inputs that get a gradient
  std::unordered_set<const c10::TensorImpl*> seen;
  for (const at::Tensor& i : inputs) {
    if (i.requires_grad() && seen.insert(i.unsafeGetTensorImpl()).second) sends.push_back(i);
  }
  // A module none of whose inputs needs a gradient (the first layer) sends none: its parameters'
  // gradients are the gradient sentinel's.
  if (sends.empty()) return;
  auto watch = std::make_shared<GradWatch>();
  watch->module = id;
  watch->inputs_left = static_cast<int>(sends.size());
  bool receives = false;
  for (const at::Tensor& o : outputs) {
    if (!o.requires_grad()) continue;
    receives = true;
    // `this` outlives every hook: the trail is the process's Probes', never destroyed.
    o.register_hook([this, watch](const at::Tensor& grad) { received(*watch, grad); });
  }
  if (!receives) return;
  for (const at::Tensor& i : sends) {
    i.register_hook([this, watch](const at::Tensor& grad) { sent(*watch, grad); });
  }
}

void ModuleTrail::received(GradWatch& watch, const at::Tensor& grad) {
  ProbeCost::Scope cost(ProbeStage::kTrail);
  try {
    if (!session_.active() || !checkable(grad)) return;
    std::lock_guard<std::mutex> lock(watch.mu);
    watch.received.push_back(grad);
  } catch (const std::exception& e) {
    logOnce("trail backward", std::string("--trail: a module's gradients are not checked: ") + e.what());
  }
}

// The gradient of an input is the sum over everything that used it: when several modules take
// the same tensor, each is judged on that sum, and the rows say which gradient it was (the same
// tensor is handed to every hook on it in turn), so the report can name them together.
void ModuleTrail::sent(GradWatch& watch, const at::Tensor& grad) {
  ProbeCost::Scope cost(ProbeStage::kTrail);
  try {
    if (!session_.active() || !checkable(grad)) return;
    std::vector<at::Tensor> tensors;
    {
      std::lock_guard<std::mutex> lock(watch.mu);
      tensors = watch.received;
      if (--watch.inputs_left <= 0) watch.received.clear();  // the module's backward is done
    }
    const size_t received = tensors.size();
    tensors.push_back(grad);
    Site s = site(watch.module, Phase::kBackward);
    s.seen = received ? ModuleInputs::kFinite : ModuleInputs::kNone;
    s.gradient = static_cast<int64_t>(reinterpret_cast<intptr_t>(grad.unsafeGetTensorImpl()));
    check(s, tensors, received);
  } catch (const std::exception& e) {
    logOnce("trail backward", std::string("--trail: a module's gradients are not checked: ") + e.what());
  }
}

int64_t ModuleTrail::compiledOrder(int64_t graph, int64_t position, int64_t checks) {
  std::lock_guard<std::mutex> lock(mu_);
  GraphRun& run = graph_runs_[graph];
  if (run.base < 0 || run.ran.size() != static_cast<size_t>(checks) || run.ran[static_cast<size_t>(position)]) {
    run.base = next_order_;
    next_order_ += checks;
    run.ran.assign(static_cast<size_t>(checks), false);
  }
  run.ran[static_cast<size_t>(position)] = true;
  return run.base + position;
}

void ModuleTrail::compiledBackward(int64_t id, int64_t graph, int64_t position, int64_t checks,
                                   const std::vector<at::Tensor>& received, const std::vector<at::Tensor>& sent) {
  if (position < 0 || checks <= position || checks > (int64_t{1} << 20)) return;
  ProbeCost::Scope cost(ProbeStage::kTrail);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (static_cast<size_t>(id) >= names_.size() || names_[static_cast<size_t>(id)].backward_off) return;
  }
  std::vector<at::Tensor> tensors;
  for (const at::Tensor& r : received) {
    if (checkable(r)) tensors.push_back(r);
  }
  const size_t n_received = tensors.size();
  for (const at::Tensor& g : sent) {
    if (checkable(g) && !isAnInput(g, received)) tensors.push_back(g);
  }
  if (tensors.size() == n_received) return;
  Site s = site(id, Phase::kBackward);
  s.order = compiledOrder(graph, position, checks);
  s.seen = n_received ? ModuleInputs::kFinite : ModuleInputs::kNone;
  s.gradient = static_cast<int64_t>(reinterpret_cast<intptr_t>(tensors[n_received].unsafeGetTensorImpl()));
  check(s, tensors, n_received);
}

void ModuleTrail::backwardUnchecked(int64_t id, const std::string& unchecked_before) {
  std::lock_guard<std::mutex> lock(mu_);
  if (id >= 0 && static_cast<size_t>(id) < names_.size()) {
    names_[static_cast<size_t>(id)].backward_unchecked = splitList(unchecked_before, '\n');
  }
}

void ModuleTrail::backwardOff(int64_t first, int64_t count) {
  std::lock_guard<std::mutex> lock(mu_);
  for (int64_t id = std::max<int64_t>(first, 0); id < first + count && static_cast<size_t>(id) < names_.size(); ++id) {
    names_[static_cast<size_t>(id)].backward_off = true;
  }
}

void ModuleTrail::compiledBackwardState(bool checked) {
  const int want = checked ? 1 : 2;
  int was = backward_state_.load();
  // "unchecked" is final: one backward graph nanprov could not check is enough for the report to say so.
  while (was != 2 && was != want && !backward_state_.compare_exchange_weak(was, want)) {
  }
  if (was != want && was != 2) {
    session_.setCounters(
        {.trail_compiled_backward = checked ? CompiledBackward::kChecked : CompiledBackward::kUnchecked});
  }
}

void ModuleTrail::check(const Site& s, const std::vector<at::Tensor>& tensors, size_t n_inputs) {
  Tally in, out;
  // CUDA tensors by device, each device's in launches of at most kMaxMeasured; the CPU's at once.
  std::map<int, std::vector<size_t>> cuda;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor& t = tensors[i];
    if (t.is_cuda()) {
      cuda[t.device().index()].push_back(i);
      continue;
    }
    const TensorHealth h = measureValues(t);
    (i < n_inputs ? in : out).add({h.nan, h.posinf, h.neginf, h.max_abs});
  }
  if (cuda.empty()) return judge(s, in, out);

  std::vector<std::pair<uint64_t, std::vector<at::Tensor>>> launches;
  uint64_t pending_id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (pending_.size() >= kMaxPending) return;
    pending_id = next_pending_++;
    Pending& p = pending_[pending_id];
    p.site = s, p.in = in, p.out = out;
    for (const auto& [device, indices] : cuda) {
      for (size_t from = 0; from < indices.size(); from += MeasuredChecks::kMaxMeasured) {
        const size_t to = std::min(indices.size(), from + MeasuredChecks::kMaxMeasured);
        Launch launch{.pending = pending_id};
        std::vector<at::Tensor> batch;
        for (size_t k = from; k < to; ++k) {
          if (indices[k] < n_inputs) launch.inputs |= 1u << (k - from);
          batch.push_back(tensors[indices[k]]);
        }
        const uint64_t context = next_launch_++;
        launches_[context] = launch;
        launches.emplace_back(context, std::move(batch));
        ++p.launches;
      }
    }
  }
  // Not under mu_: a check the kernel cannot read is measured on the host and answered at once.
  for (const auto& [context, batch] : launches) {
    bool answered = false;
    try {
      answered = checks_.measure(batch, *this, context);
    } catch (const std::exception& e) {
      logOnce("trail device", std::string("--trail: a module check failed on the device: ") + e.what());
    }
    if (!answered) {  // never comes back (CUDA graph capture, a failure): the call is not judged
      std::lock_guard<std::mutex> lock(mu_);
      launches_.erase(context);
      pending_.erase(pending_id);
    }
  }
}

void ModuleTrail::measured(uint64_t context, const MeasuredChecks::Counts* counts, int n) {
  Pending done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto launch = launches_.find(context);
    if (launch == launches_.end()) return;
    const Launch l = launch->second;
    launches_.erase(launch);
    auto p = pending_.find(l.pending);
    if (p == pending_.end()) return;
    if (n == 0) {  // failed on the device
      pending_.erase(p);
      return;
    }
    for (int i = 0; i < n; ++i) ((l.inputs >> i) & 1u ? p->second.in : p->second.out).add(counts[i]);
    if (--p->second.launches > 0) return;
    done = p->second;
    pending_.erase(p);
  }
  judge(done.site, done.in, done.out);
}

void ModuleTrail::judge(const Site& s, const Tally& in, const Tally& out) {
  if (out.nonfinite() == 0) return;
  ModuleCheckRecord r;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Results do not arrive in step order (the CPU's at once, a GPU's at a later poll): an earlier
    // step found later starts the rows again; readers take the earliest step the store holds.
    if (found_step_ >= 0 && s.step > found_step_) return;
    if (s.step != found_step_) found_step_ = s.step, found_rows_ = 0;
    if (++found_rows_ > kMaxRows) return;
    if (static_cast<size_t>(s.module) < names_.size()) {
      const Name& n = names_[static_cast<size_t>(s.module)];
      r.module = n.path, r.module_class = n.module_class;
      // A compiled backward's check reads other values than its forward's: what ran unchecked
      // before it is its own. Eager checks have none before them.
      r.unchecked_before = s.phase == Phase::kBackward ? n.backward_unchecked : n.unchecked_before;
    }
  }
  r.step = s.step;
  r.phase = s.phase;
  r.inputs = in.nonfinite() > 0 ? ModuleInputs::kNonFinite : s.seen;
  r.nan = out.nan, r.posinf = out.posinf, r.neginf = out.neginf;
  r.largest_input = in.largest;
  r.order = s.order;
  r.time_ns = s.time_ns;
  r.gradient = s.gradient;
  session_.recordModuleChecks({std::move(r)});
}

}  // namespace nanprov::probes
