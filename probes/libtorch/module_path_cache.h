// ModulePathCache: the module path of a forward attention call without asking Python each time.
//
// Asking Python (the bootstrap's stack walk, through a ctypes callback) costs about 18 µs a call.
// In training, a call's Q is made from the attention module's own parameters (its projection,
// its norm), so the first parameter found walking back Q's autograd graph names the module as
// well as the stack does, for about a microsecond. A parameter is trusted once the stack walk
// gave the same path for it kConfirmations times in a row; one seen with two paths (weights tied
// across modules) is never trusted. Entries hold their parameter weakly: that keeps its TensorImpl
// allocation (not its storage), so no later tensor can take the address while it is remembered. Without a parameter
// behind Q (inference, no_grad, a leaf Q) and inside compiled graphs (whose paths the bootstrap hands out in graph
// order) Python is asked, as before.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

#include "base/interned_text.h"

namespace nanprov::probes {

class ModulePathCache {
 public:
  static constexpr int kConfirmations = 3;
  // Beyond this many remembered parameters, those freed since are forgotten; if none was, new
  // ones are not learnt (their calls ask Python). Scripts that make Q from fresh leaf tensors
  // every step would otherwise grow it forever.
  static constexpr int kMaxEntries = 4096;

  // The parameter that produced `q` (breadth-first over at most kMaxNodes of its autograd graph),
  // or an undefined tensor when none does.
  static at::Tensor sourceParameter(const at::Tensor& q);

  // The module path of a call whose Q came from `parameter`: remembered when trusted, else
  // `resolve()`'s answer (the stack walk), which also teaches the cache. A trusted path is
  // final (trusted entries are never asked again), so each thread also keeps the ones it used
  // last where it reads them without the lock.
  template <typename Resolve>
  InternedText path(const at::Tensor& parameter, Resolve&& resolve) {
    if (!parameter.defined()) return InternedText(resolve());
    InternedText resolved;
    if (recalled(parameter, &resolved)) return resolved;
    if (trusted(parameter, &resolved)) {
      remember(parameter, resolved);
      return resolved;
    }
    resolved = InternedText(resolve());
    learn(parameter, resolved);
    return resolved;
  }

  int64_t size() const;

 private:
  static constexpr int kMaxNodes = 32;
  using Held = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;
  struct Entry {
    Held parameter;
    InternedText path;
    int confirmations = 0;
    bool ambiguous = false;
  };
  bool trusted(const at::Tensor& parameter, InternedText* path) const;
  void learn(const at::Tensor& parameter, InternedText path);
  // This thread's recently used trusted paths (no lock).
  bool recalled(const at::Tensor& parameter, InternedText* path) const;
  void remember(const at::Tensor& parameter, InternedText path) const;

  mutable std::mutex mu_;
  std::unordered_map<const c10::TensorImpl*, Entry> entries_;
};

}  // namespace nanprov::probes
