// CallArgs: the arguments of a call that are not role tensors, as the op received them: scale,
// is_causal, dropout_p, enable_gqa, philox seed and offset... Held as IValues: formatted only for
// a capture (call_capture.h) or used by a rerun (call_rerun.h). Inline, for the same reason as
// RoleTensors (tensor_health.h); the names are the probed op's own (they outlive it).
#pragma once

#include <ATen/core/ivalue.h>
#include <c10/util/SmallVector.h>

#include <string_view>
#include <utility>

namespace nanprov::probes {

using CallArgs = c10::SmallVector<std::pair<std::string_view, c10::IValue>, 16>;

}  // namespace nanprov::probes
