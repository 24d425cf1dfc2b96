// ModuleTrail: `nanprov run --trail`. Names the first module that made a non-finite value when it
// was not attention: the first module call whose output went NaN/Inf from finite inputs
// (forward), or whose backward sent a non-finite gradient to one of its inputs while every
// gradient it received was finite (backward).
//
// The bootstrap's one global forward hook (probes/bootstrap/nanprov_boot/trail.py) hands every
// module call's tensors to torch.ops.nanprov.trail_forward. The forward's inputs and outputs are
// measured at once: on the CPU on the host (the checks' bit-level scan), on CUDA by the attention
// checks' own fused kernel (MeasuredChecks::measure), results collected at later polls, no host
// synchronisation. In training, C++ tensor hooks on the call's outputs keep the gradients the
// module receives until the gradient of one of its inputs arrives; both are then measured
// together. The hooks only read: the training's values are untouched.
//
// Only module calls whose outputs went non-finite are stored, and only those of the first step
// that had any (as the gradient sentinel does): the report needs the first, and everything after
// it is propagation.
//
// A module that looks like attention by its name (base/attention_like.h) is also watched for
// whether attention nanprov checks ran inside it: one that ran none (linear attention, a custom
// kernel) is counted as unchecked attention, named by its class, so a run with it is never
// called clean and the report can say where the values were made.
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/records/call_record.h"
#include "probes/libtorch/measured_checks.h"

namespace nanprov::probes {

class Session;

class ModuleTrail final : public MeasuredSink {
 public:
  ModuleTrail(Session& session, MeasuredChecks& checks) : session_(session), checks_(checks) {}
  ModuleTrail(const ModuleTrail&) = delete;
  ModuleTrail& operator=(const ModuleTrail&) = delete;

  // Module `id` (the bootstrap numbers modules as it first sees them) is `path`, of `module_class`.
  // `unchecked_before`: in compiled code, the modules that ran unchecked between the values its
  // check reads as inputs and its output ('\n' between paths; ModuleCheckRecord::unchecked_before).
  // Returns whether it looks like attention: the bootstrap then calls enter() as each of its calls begins.
  bool name(int64_t id, const std::string& path, const std::string& module_class, const std::string& unchecked_before);
  // A call of module `id`, which looks like attention, begins on this thread; leave(): it ended
  // (after every other hook of the module ran: a --probe-module's record among them), and is
  // counted unchecked when no attention nanprov checks ran in it.
  void enter(int64_t id);
  void leave(int64_t id);
  // A call of module `id` returned `outputs` from `inputs`: checks them (not for a forward that
  // activation checkpointing recomputes: the original was checked) and, with gradients on, watches
  // its backward. `inputs_whole`: the bootstrap saw every tensor the call received (false when it
  // was handed objects it does not look into, or more than it walks).
  void forward(int64_t id, const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs,
               bool inputs_whole = true);

  // Inside a compiled backward (compiled_trail.py's pass over AOT's backward graph): module `id`'s
  // backward `sent` gradients (and its parameters') from what it `received` (incoming gradients,
  // and the forward values saved for it), the values Inductor writes anyway.
  // Inductor may run the checks of one graph in another order than the graph's: a check's order
  // among the records is its `position` of the graph's `checks`, from a block of orders taken when
  // a run of the graph (`graph`, the bootstrap's number for it) begins.
  void compiledBackward(int64_t id, int64_t graph, int64_t position, int64_t checks,
                        const std::vector<at::Tensor>& received, const std::vector<at::Tensor>& sent);
  // In a compiled backward, module `id`'s check has `unchecked_before` ('\n' between paths) between
  // the values it reads as received and its gradients: where its backward's records say so.
  void backwardUnchecked(int64_t id, const std::string& unchecked_before);
  // Module numbers [first, first + count) must not be checked in a compiled backward any more: the
  // backward graph that names them serves another place now too (compiled_trail.py).
  void backwardOff(int64_t first, int64_t count);
  // Whether the modules' backward inside compiled code was checked, in the store's meta
  // (trail_compiled_backward): "checked", until one backward graph could not be, then "unchecked".
  void compiledBackwardState(bool checked);

  // The gradients of one module call: what it received (its outputs' gradients), held until the
  // gradient it sends to an input arrives. Owned by the tensor hooks, so it lives as long as the
  // autograd graph does, and the received gradients only until the module's backward is done.
  struct GradWatch {
    std::mutex mu;
    int64_t module = 0;
    std::vector<at::Tensor> received;
    int inputs_left = 0;
  };
  void received(GradWatch& watch, const at::Tensor& grad);
  void sent(GradWatch& watch, const at::Tensor& grad);

 private:
  struct Site {
    int64_t module = 0;
    int64_t step = 0;
    Phase phase = Phase::kForward;
    int64_t order = 0;
    int64_t time_ns = 0;
    int64_t gradient = 0;  // backward: the gradient sent (ModuleCheckRecord::gradient)
    // What the inputs are, should the checks find them finite: kFinite, kNone or kPartlySeen.
    ModuleInputs seen = ModuleInputs::kFinite;
  };
  // Counts over a set of tensors: the inputs' or the outputs' of one check.
  struct Tally {
    int64_t nan = 0, posinf = 0, neginf = 0;
    double largest = 0;
    void add(const MeasuredChecks::Counts& c);
    int64_t nonfinite() const { return nan + posinf + neginf; }
  };
  // A check whose CUDA tensors are in flight, in one or more launches.
  struct Pending {
    Site site;
    Tally in, out;
    int launches = 0;
  };
  struct Launch {
    uint64_t pending = 0;
    uint32_t inputs = 0;  // bit i: the i-th measured tensor is an input
  };

  Site site(int64_t module, Phase phase);
  // Measures `tensors` (the first `n_inputs` are inputs) and judges them once all are known.
  void check(const Site& site, const std::vector<at::Tensor>& tensors, size_t n_inputs);
  // The counts of a measure() this part asked for (MeasuredSink).
  void measured(uint64_t context, const MeasuredChecks::Counts* counts, int n) override;
  void judge(const Site& site, const Tally& in, const Tally& out);
  void watchGradients(int64_t id, const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs);

  Session& session_;
  MeasuredChecks& checks_;
  std::mutex mu_;  // guards everything below; never held across a MeasuredChecks call
  struct Name {
    std::string path, module_class;
    std::vector<std::string> unchecked_before;
    std::string unchecked_attention;  // attention-like: what it is counted as when nothing inside was checked
    std::vector<std::string> backward_unchecked;  // backwardUnchecked(): a compiled backward's
    bool backward_off = false;                    // backwardOff()
  };
  std::vector<Name> names_;  // by module id
  std::map<uint64_t, Pending> pending_;
  std::map<uint64_t, Launch> launches_;
  uint64_t next_pending_ = 1, next_launch_ = 1;
  int64_t next_order_ = 0;
  int64_t found_step_ = -1;
  size_t found_rows_ = 0;
  // A compiled backward graph's current run: the first order of its block, and the positions
  // whose checks ran in it (one seen again begins the next run).
  struct GraphRun {
    int64_t base = -1;
    std::vector<bool> ran;
  };
  std::map<int64_t, GraphRun> graph_runs_;
  int64_t compiledOrder(int64_t graph, int64_t position, int64_t checks);
  std::atomic<int> backward_state_{0};  // compiledBackwardState(): 0 unsaid, 1 checked, 2 unchecked
};

}  // namespace nanprov::probes
