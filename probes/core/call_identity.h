// CallIdentity: gives every attention call its rank:layer:call name, its step and, for a
// backward call, the forward call it differentiates. Pure bookkeeping, thread-safe: forward
// calls come from the training thread, backward calls (and checkpoint recomputes) from
// autograd's threads.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/interned_text.h"
#include "base/records/call_record.h"

namespace nanprov::probes {

// The layer number a module path spells: its only all-digit component
// ("model.layers.33.self_attn" → 33). -1 when it has none, or several
// ("stages.1.blocks.0.attn"), because then no one number names the module.
int64_t layerFromModulePath(std::string_view path);

struct CallName {
  int64_t seq = 0;
  int64_t step = 0;
  int64_t layer = -1;
  int64_t call = 0;
  int64_t fwd_seq = -1;            // backward: its forward; recompute: the original forward
  InternedText module;             // copied with the name, never reallocated
  bool recompute = false;          // a forward recomputed by activation checkpointing
  bool opened_step = false;        // this call began a new forward pass (inference without optimizer)
  bool compiled_training = false;  // ran inside a torch.compile'd graph with gradients on
};

// What the probe knows about a forward call when it names it.
struct ForwardSite {
  InternedText module;       // module path; may be empty
  bool in_backward = false;  // autograd's engine is running: checkpointing recomputes it
  bool grad_enabled = true;  // false under no_grad / inference_mode
  bool compiled = false;     // inside a torch.compile'd graph
};

// What `step` counts: optimizer steps, or, in a run that never steps an optimizer and runs
// attention without gradients (inference), top-level forward passes.

class CallIdentity {
 public:
  // A forward call, named before it runs (its kernels are traced under that name).
  CallName forward(const ForwardSite& site);
  // Makes `fwd` findable by its backward through `link` (the address of its output O).
  void link(const CallName& fwd, uintptr_t link);
  // Both at once, for a call whose output is already known.
  CallName forward(const ForwardSite& site, uintptr_t link);
  // A backward call whose saved output O is at `link`. Unlinked calls keep layer -1.
  CallName backward(uintptr_t link);
  // A backward call already known to belong to `fwd` (autograd hooks on the MATH path).
  CallName backwardOf(const CallName& fwd);

  // A call captured into a CUDA graph, run again by a replay of that graph: named anew in the
  // current step, in the captured call's layer and module. `fwd_seq` is the forward it
  // differentiates (that replay's), -1 for a forward; `recompute` is the captured call's.
  CallName replayed(int64_t layer, InternedText module, int64_t fwd_seq, bool recompute);

  // An optimizer step completed; `optimizer_steps` is the new count. Returns false when it is
  // not new.
  bool stepEnded(int64_t optimizer_steps);
  int64_t step() const;
  StepUnit stepUnit() const;
  // Forward calls of compiled training graphs whose backward never reached the probes by the end
  // of their step (Inductor lowered it to its own kernels, or it never ran); taken once.
  int64_t takeUnseenCompiledBackwards();
  // The run ended: the last step's forwards still waiting for their backward count as unseen.
  void runEnded();

 private:
  CallName nameCall(int64_t layer, InternedText module, int64_t fwd_seq);
  CallName forwardLocked(const ForwardSite& site);
  void linkLocked(const CallName& fwd, uintptr_t link);
  void forgetPending();  // nodes kept for reuse
  int64_t layerOf(InternedText module);
  void beginStep(int64_t step);
  bool opensForwardPass(const ForwardSite& site);

  // Forward calls awaiting their backward (and their recompute), bounded so forward-only loops
  // cannot grow them.
  static constexpr size_t kMaxPendingLinks = 1 << 16;
  static constexpr size_t kMaxFreeNodes = 4096;

  mutable std::mutex mu_;
  int64_t next_seq_ = 0;
  int64_t step_ = 0;
  int64_t forward_ordinal_in_step_ = 0;
  std::map<int64_t, int64_t> calls_per_layer_;
  // Map nodes are recycled (extract, then insert again): linking and finding a call's forward
  // allocate nothing in steady state.
  using Pending = std::unordered_map<uintptr_t, CallName>;
  Pending pending_;
  std::vector<Pending::node_type> free_pending_;

  // One layer number per module path, given at its first call.
  std::unordered_map<const char*, int64_t> module_layers_;  // keyed by the interned path
  std::set<int64_t> used_layers_;

  // This step's original forward calls per module, newest last: a recompute is matched to the
  // newest one not yet recomputed (a micro-batch's backward follows its own forward). Emptied,
  // not erased, at each step: the vectors keep their room.
  std::unordered_map<const char*, std::vector<CallName>> originals_;
  size_t originals_count_ = 0;

  // Inference: the modules seen in the current forward pass; a module seen twice opens the next.
  StepUnit unit_ = StepUnit::kOptimizerStep;
  bool optimizer_stepped_ = false;
  int64_t passes_before_training_ = 0;
  std::set<const char*> pass_modules_;
  int64_t unseen_compiled_backwards_ = 0;
};

}  // namespace nanprov::probes
