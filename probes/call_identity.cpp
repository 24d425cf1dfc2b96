#include "probes/call_identity.h"

#include <cctype>

namespace nanprov {

int64_t layerFromModulePath(const std::string& path) {
  int64_t layer = -1;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('.', start);
    if (end == std::string::npos) end = path.size();
    bool digits = end > start && end - start < 10;
    for (size_t i = start; i < end && digits; ++i) digits = std::isdigit(static_cast<unsigned char>(path[i]));
    if (digits) layer = std::stoll(path.substr(start, end - start));
    start = end + 1;
  }
  return layer;
}

CallName CallIdentity::nameCall(int64_t layer, std::string module, int64_t fwd_seq) {
  CallName name;
  name.seq = next_seq_++;
  name.step = step_;
  name.layer = layer;
  name.call = calls_per_layer_[layer]++;
  name.fwd_seq = fwd_seq;
  name.module = std::move(module);
  return name;
}

CallName CallIdentity::forward(const std::string& module_path) {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t layer = layerFromModulePath(module_path);
  if (layer < 0) layer = forward_ordinal_in_step_;
  ++forward_ordinal_in_step_;
  return nameCall(layer, module_path, -1);
}

void CallIdentity::link(const CallName& fwd, uintptr_t link) {
  if (link == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (pending_.size() >= kMaxPendingLinks) {
    pending_.erase(pending_order_.front());
    pending_order_.pop_front();
  }
  if (pending_.insert_or_assign(link, fwd).second) pending_order_.push_back(link);
}

CallName CallIdentity::forward(const std::string& module_path, uintptr_t link) {
  CallName name = forward(module_path);
  this->link(name, link);
  return name;
}

CallName CallIdentity::backward(uintptr_t link) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pending_.find(link);
  if (it == pending_.end()) return nameCall(-1, "", -1);
  CallName fwd = std::move(it->second);
  pending_.erase(it);
  // pending_order_ keeps the stale key; erase() of a missing key later is harmless.
  return nameCall(fwd.layer, fwd.module, fwd.seq);
}

CallName CallIdentity::backwardOf(const CallName& fwd) {
  std::lock_guard<std::mutex> lock(mu_);
  return nameCall(fwd.layer, fwd.module, fwd.seq);
}

bool CallIdentity::stepEnded(int64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  if (step <= step_) return false;
  step_ = step;
  forward_ordinal_in_step_ = 0;
  // Every backward of the step has run before the optimizer stepped.
  pending_.clear();
  pending_order_.clear();
  return true;
}

int64_t CallIdentity::step() const {
  std::lock_guard<std::mutex> lock(mu_);
  return step_;
}

}  // namespace nanprov
