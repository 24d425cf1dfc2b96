// CallIdentity: gives every attention call its rank:layer:call name, its step and, for a
// backward call, the forward call it differentiates. Pure bookkeeping, thread-safe: forward
// calls come from the training thread, backward calls from autograd's threads.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

#include "store/call_record.h"

namespace nanprov {

// The layer number in a module path: its last all-digit component
// ("model.layers.33.self_attn" → 33). -1 when there is none.
int64_t layerFromModulePath(const std::string& path);

struct CallName {
  int64_t seq = 0;
  int64_t step = 0;
  int64_t layer = -1;
  int64_t call = 0;
  int64_t fwd_seq = -1;
  std::string module;
};

class CallIdentity {
 public:
  // A forward call, named before it runs (its kernels are traced under that name).
  CallName forward(const std::string& module_path);
  // Makes `fwd` findable by its backward through `link` (the address of its output O).
  void link(const CallName& fwd, uintptr_t link);
  // Both at once, for a call whose output is already known.
  CallName forward(const std::string& module_path, uintptr_t link);
  // A backward call whose saved output O is at `link`. Unlinked calls keep layer -1.
  CallName backward(uintptr_t link);
  // A backward call already known to belong to `fwd` (autograd hooks on the MATH path).
  CallName backwardOf(const CallName& fwd);

  // An optimizer step completed; `step` is the new count. Returns false when it is not new.
  bool stepEnded(int64_t step);
  int64_t step() const;

 private:
  CallName nameCall(int64_t layer, std::string module, int64_t fwd_seq);

  // Forward calls awaiting their backward, bounded so forward-only loops cannot grow it.
  static constexpr size_t kMaxPendingLinks = 1 << 16;

  mutable std::mutex mu_;
  int64_t next_seq_ = 0;
  int64_t step_ = 0;
  int64_t forward_ordinal_in_step_ = 0;
  std::map<int64_t, int64_t> calls_per_layer_;
  std::unordered_map<uintptr_t, CallName> pending_;
  std::deque<uintptr_t> pending_order_;
};

}  // namespace nanprov
