// Work that needs an op's output as autograd hands it out, with its history (a grad_fn, so that a
// gradient hook can be registered on it). The probes sit below autograd, where an output has no
// history yet: autograd sets it after the kernel returns. So the work waits for the end of the
// op, seen through a RecordFunction callback on this thread only, armed before the op begins and
// gone once it ended: it taxes the few ops in between on this thread, never the process.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>

namespace nanprov::probes {

// From now on, every op this thread runs is seen at its end (a RecordFunction's callbacks are
// chosen when the op begins: arm before the op whose output is wanted). Idempotent.
void armOutputHistory();

// Once the op now running on this thread returns `out` (by identity) with its history, `then`
// runs with it, and the callback is removed. Replaces any work still waiting.
void whenOutputHasHistory(const at::Tensor& out, std::function<void(const at::Tensor&)> then);

// Drops the work waiting, if any, and the callback.
void disarmOutputHistory();
// Drops the callback if no work waits (the op it was armed for ended without asking for any).
void disarmOutputHistoryIfIdle();

}  // namespace nanprov::probes
