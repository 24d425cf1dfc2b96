#include "probes/libtorch/output_history.h"

#include <ATen/record_function.h>

#include <memory>
#include <optional>
#include <utility>

#include "probes/libtorch/guarded.h"

namespace nanprov::probes {
namespace {

struct Waiting {
  std::optional<at::CallbackHandle> handle;
  const c10::TensorImpl* out = nullptr;  // by identity only: never dereferenced
  std::function<void(const at::Tensor&)> then;
};

thread_local Waiting t_waiting;

std::unique_ptr<at::ObserverContext> atStart(const at::RecordFunction&) { return nullptr; }

void atEnd(const at::RecordFunction& fn, at::ObserverContext*) {
  if (!t_waiting.out) return;
  for (const c10::IValue& value : fn.outputs()) {
    if (!value.isTensor() || value.toTensor().unsafeGetTensorImpl() != t_waiting.out) continue;
    std::function<void(const at::Tensor&)> then = std::move(t_waiting.then);
    const at::Tensor out = value.toTensor();
    disarmOutputHistory();  // first: `then` may run ops, which must not come back here
    guarded("output history", [&] { then(out); });
    return;
  }
}

}  // namespace

void armOutputHistory() {
  if (t_waiting.handle) return;
  t_waiting.handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback(&atStart, &atEnd).needsOutputs(true).scopes({at::RecordScope::FUNCTION}));
}

void whenOutputHasHistory(const at::Tensor& out, std::function<void(const at::Tensor&)> then) {
  t_waiting.out = out.unsafeGetTensorImpl();
  t_waiting.then = std::move(then);
}

void disarmOutputHistory() {
  if (t_waiting.handle) at::removeCallback(*t_waiting.handle);
  t_waiting.handle.reset();
  t_waiting.out = nullptr;
  t_waiting.then = nullptr;
}

void disarmOutputHistoryIfIdle() {
  if (!t_waiting.out) disarmOutputHistory();
}

}  // namespace nanprov::probes
