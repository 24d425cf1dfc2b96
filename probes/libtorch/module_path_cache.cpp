#include "probes/libtorch/module_path_cache.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>

#include <c10/util/SmallVector.h>

namespace nanprov {

at::Tensor ModulePathCache::sourceParameter(const at::Tensor& q) {
  if (!q.defined() || !q.requires_grad()) return {};
  const auto root = q.grad_fn();  // shared_ptr in torch 2.11, intrusive_ptr in 2.13
  if (!root) return {};
  // Breadth-first, so the parameter nearest Q wins: the module's own projection or norm rather
  // than one of an earlier layer.
  c10::SmallVector<torch::autograd::Node*, kMaxNodes> queue{root.get()};
  for (size_t i = 0; i < queue.size(); ++i) {
    for (const torch::autograd::Edge& edge : queue[i]->next_edges()) {
      torch::autograd::Node* next = edge.function.get();
      if (!next) continue;
      if (auto* leaf = dynamic_cast<torch::autograd::AccumulateGrad*>(next)) {
        if (leaf->variable.defined()) return leaf->variable;
        continue;
      }
      if (queue.size() < kMaxNodes) queue.push_back(next);
    }
  }
  return {};
}

bool ModulePathCache::trusted(const at::Tensor& parameter, std::string* path) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(parameter.unsafeGetTensorImpl());
  if (it == entries_.end() || it->second.ambiguous || it->second.confirmations < kConfirmations) return false;
  *path = it->second.path;
  return true;
}

void ModulePathCache::learn(const at::Tensor& parameter, const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(parameter.unsafeGetTensorImpl());
  if (it == entries_.end()) {
    if (entries_.size() >= static_cast<size_t>(kMaxEntries)) {
      std::erase_if(entries_, [](const auto& entry) { return entry.second.parameter.expired(); });
      if (entries_.size() >= static_cast<size_t>(kMaxEntries)) return;
    }
    entries_.emplace(parameter.unsafeGetTensorImpl(),
                     Entry{Held(parameter.getIntrusivePtr()), path, 1, false});
    return;
  }
  Entry& e = it->second;
  if (e.path != path) e.ambiguous = true;
  else ++e.confirmations;
}

int64_t ModulePathCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(entries_.size());
}

}  // namespace nanprov
