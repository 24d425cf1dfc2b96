#include "probes/core/call_identity.h"

#include <cctype>

namespace nanprov::probes {

int64_t layerFromModulePath(std::string_view path) {
  int64_t layer = -1;
  int numbers = 0;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('.', start);
    if (end == std::string_view::npos) end = path.size();
    bool digits = end > start && end - start < 10;
    for (size_t i = start; i < end && digits; ++i) digits = std::isdigit(static_cast<unsigned char>(path[i]));
    if (digits) {
      layer = 0;
      for (size_t i = start; i < end; ++i) layer = layer * 10 + (path[i] - '0');
      ++numbers;
    }
    start = end + 1;
  }
  return numbers == 1 ? layer : -1;
}

CallName CallIdentity::nameCall(int64_t layer, InternedText module, int64_t fwd_seq) {
  CallName name;
  name.seq = next_seq_++;
  name.step = step_;
  name.layer = layer;
  name.call = calls_per_layer_[layer]++;
  name.fwd_seq = fwd_seq;
  name.module = module;
  return name;
}

// The module's own number when its path spells one that no other module holds; otherwise its
// ordinal among attention modules in first-call order, moved past numbers already held. So two
// modules never share a layer, and `layers.33.attn` stays layer 33.
int64_t CallIdentity::layerOf(InternedText module) {
  if (module.empty()) return forward_ordinal_in_step_;
  auto known = module_layers_.find(module.c_str());
  if (known != module_layers_.end()) return known->second;
  int64_t layer = layerFromModulePath(module.view());
  if (layer < 0 || used_layers_.count(layer)) {
    layer = static_cast<int64_t>(module_layers_.size());
    while (used_layers_.count(layer)) ++layer;
  }
  module_layers_.emplace(module.c_str(), layer);
  used_layers_.insert(layer);
  return layer;
}

void CallIdentity::beginStep(int64_t step) {
  for (const auto& [address, fwd] : pending_) unseen_compiled_backwards_ += fwd.compiled_training ? 1 : 0;
  step_ = step;
  forward_ordinal_in_step_ = 0;
  // Every backward (and recompute) of the step has run before the optimizer stepped.
  forgetPending();
  for (auto& [module, calls] : originals_) calls.clear();
  originals_count_ = 0;
  pass_modules_.clear();
}

// Without optimizer steps and without gradients, a module that runs attention a second time
// starts the next top-level forward pass. (A module that shares its weights across a pass
// would count twice; no cheaper signal sees the outermost forward without taxing every module.)
bool CallIdentity::opensForwardPass(const ForwardSite& site) {
  if (site.grad_enabled || optimizer_stepped_ || site.in_backward || site.module.empty()) return false;
  unit_ = StepUnit::kForwardPass;
  if (pass_modules_.insert(site.module.c_str()).second) return false;
  beginStep(step_ + 1);
  pass_modules_.insert(site.module.c_str());
  return true;
}

CallName CallIdentity::forward(const ForwardSite& site) {
  std::lock_guard<std::mutex> lock(mu_);
  return forwardLocked(site);
}

CallName CallIdentity::forwardLocked(const ForwardSite& site) {
  bool opened = opensForwardPass(site);
  int64_t layer = layerOf(site.module);
  ++forward_ordinal_in_step_;
  if (site.in_backward && !site.module.empty()) {
    auto it = originals_.find(site.module.c_str());
    if (it != originals_.end() && !it->second.empty()) {
      CallName name = std::move(it->second.back());
      it->second.pop_back();
      --originals_count_;
      name.fwd_seq = name.seq;
      name.seq = next_seq_++;
      name.recompute = true;
      name.opened_step = false;
      return name;
    }
  }
  CallName name = nameCall(layer, site.module, -1);
  name.recompute = site.in_backward;
  name.compiled_training = site.compiled && site.grad_enabled;
  name.opened_step = opened;
  if (!site.in_backward && !site.module.empty()) {
    if (originals_count_ >= kMaxPendingLinks) {
      originals_.clear();
      originals_count_ = 0;
    }
    originals_[site.module.c_str()].push_back(name);
    ++originals_count_;
  }
  return name;
}

void CallIdentity::link(const CallName& fwd, uintptr_t link) {
  if (link == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  linkLocked(fwd, link);
}

void CallIdentity::linkLocked(const CallName& fwd, uintptr_t link) {
  if (link == 0) return;
  // Forward-only loops never take their links: past the bound they are all forgotten at once.
  if (pending_.size() >= kMaxPendingLinks) forgetPending();
  if (auto it = pending_.find(link); it != pending_.end()) {
    it->second = fwd;
    return;
  }
  if (free_pending_.empty()) {
    pending_.emplace(link, fwd);
    return;
  }
  Pending::node_type node = std::move(free_pending_.back());
  free_pending_.pop_back();
  node.key() = link;
  node.mapped() = fwd;
  pending_.insert(std::move(node));
}

void CallIdentity::forgetPending() {
  while (!pending_.empty()) {
    Pending::node_type node = pending_.extract(pending_.begin());
    if (free_pending_.size() < kMaxFreeNodes) free_pending_.push_back(std::move(node));
  }
}

CallName CallIdentity::forward(const ForwardSite& site, uintptr_t link) {
  std::lock_guard<std::mutex> lock(mu_);
  CallName name = forwardLocked(site);
  linkLocked(name, link);
  return name;
}

CallName CallIdentity::backward(uintptr_t link) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pending_.find(link);
  if (it == pending_.end()) return nameCall(-1, InternedText(), -1);
  Pending::node_type node = pending_.extract(it);
  CallName name = nameCall(node.mapped().layer, node.mapped().module, node.mapped().seq);
  name.compiled_training = node.mapped().compiled_training;  // the backward of a compiled graph
  if (free_pending_.size() < kMaxFreeNodes) free_pending_.push_back(std::move(node));
  return name;
}

CallName CallIdentity::backwardOf(const CallName& fwd) {
  std::lock_guard<std::mutex> lock(mu_);
  return nameCall(fwd.layer, fwd.module, fwd.seq);
}

CallName CallIdentity::replayed(int64_t layer, InternedText module, int64_t fwd_seq, bool recompute) {
  std::lock_guard<std::mutex> lock(mu_);
  CallName name = nameCall(layer, module, fwd_seq);
  name.recompute = recompute;
  return name;
}

bool CallIdentity::stepEnded(int64_t optimizer_steps) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!optimizer_stepped_) {
    // Inference passes counted before training began keep their numbers; steps follow them.
    optimizer_stepped_ = true;
    passes_before_training_ = step_;
    unit_ = StepUnit::kOptimizerStep;
  }
  int64_t step = passes_before_training_ + optimizer_steps;
  if (step <= step_) return false;
  beginStep(step);
  return true;
}

int64_t CallIdentity::step() const {
  std::lock_guard<std::mutex> lock(mu_);
  return step_;
}

void CallIdentity::runEnded() {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [address, fwd] : pending_) unseen_compiled_backwards_ += fwd.compiled_training ? 1 : 0;
  forgetPending();
}

int64_t CallIdentity::takeUnseenCompiledBackwards() {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t n = unseen_compiled_backwards_;
  unseen_compiled_backwards_ = 0;
  return n;
}

StepUnit CallIdentity::stepUnit() const {
  std::lock_guard<std::mutex> lock(mu_);
  return unit_;
}

}  // namespace nanprov::probes
