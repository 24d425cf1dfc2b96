#include "probes/libtorch/module_path_cache.h"

#include <c10/util/SmallVector.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>

namespace nanprov::probes {

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

namespace {

// A thread's trusted paths, direct-mapped by the parameter's address. Each slot holds its
// parameter weakly, as the cache does: a freed parameter's address cannot be taken by another
// while a slot names it, and the slot reads as empty once it expired.
struct Recalled {
  const void* cache = nullptr;
  const c10::TensorImpl* key = nullptr;
  c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl> parameter{
      c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>()};
  InternedText path;
};
constexpr size_t kRecalledSlots = 64;
thread_local Recalled t_recalled[kRecalledSlots];

Recalled& slotOf(const c10::TensorImpl* key) {
  return t_recalled[(reinterpret_cast<uintptr_t>(key) >> 4) % kRecalledSlots];
}

}  // namespace

bool ModulePathCache::recalled(const at::Tensor& parameter, InternedText* path) const {
  const c10::TensorImpl* key = parameter.unsafeGetTensorImpl();
  const Recalled& slot = slotOf(key);
  if (slot.cache != this || slot.key != key || slot.parameter.expired()) return false;
  *path = slot.path;
  return true;
}

void ModulePathCache::remember(const at::Tensor& parameter, InternedText path) const {
  const c10::TensorImpl* key = parameter.unsafeGetTensorImpl();
  Recalled& slot = slotOf(key);
  slot.cache = this;
  slot.key = key;
  slot.parameter = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>(parameter.getIntrusivePtr());
  slot.path = path;
}

bool ModulePathCache::trusted(const at::Tensor& parameter, InternedText* path) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(parameter.unsafeGetTensorImpl());
  if (it == entries_.end() || it->second.ambiguous || it->second.confirmations < kConfirmations) return false;
  *path = it->second.path;
  return true;
}

void ModulePathCache::learn(const at::Tensor& parameter, InternedText path) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(parameter.unsafeGetTensorImpl());
  if (it == entries_.end()) {
    if (entries_.size() >= static_cast<size_t>(kMaxEntries)) {
      std::erase_if(entries_, [](const auto& entry) { return entry.second.parameter.expired(); });
      if (entries_.size() >= static_cast<size_t>(kMaxEntries)) return;
    }
    entries_.emplace(parameter.unsafeGetTensorImpl(), Entry{Held(parameter.getIntrusivePtr()), path, 1, false});
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

}  // namespace nanprov::probes
