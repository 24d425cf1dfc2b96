// Fault injection (`nanprov run --inject 'layer=3,phase=bwd,tensor=dQ,step=5,value=nan'`):
// which output of which call to corrupt, and how. It exists to test nanprov and a user's setup;
// it acts only when asked, and the store marks the call as injected. NaN and ±Inf go into the
// first element (a non-finite edge); zero and scale:F corrupt the whole tensor and leave it
// finite, as the silent-wrong kernels of seeds 002 and 003 do.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/records/roles.h"
#include "base/status.h"
#include "probes/core/call_selector.h"

namespace nanprov::probes {

enum class Corruption {
  kFirstElement,  // the first element becomes `value` (NaN, +Inf or -Inf)
  kZero,          // every element becomes 0
  kScale,         // every element is multiplied by `value`
};

struct InjectionSpec {
  Role tensor = Role::kO;
  Corruption corruption = Corruption::kFirstElement;
  double value = 0.0;  // the first element's new value, or the scale factor
  CallSelector where;
};

// One spec: comma-separated key=value pairs. Keys: tensor (required), value (nan|inf|-inf|zero|
// scale:F with F finite, default nan), rank, layer, step, from-step, call, phase (fwd|bwd). The tensor must be an
// output of the phase, because injection corrupts what the kernel produced.
StatusOr<InjectionSpec> parseInjection(const std::string& text);

// Several specs separated by ';' (how `nanprov run` passes repeated --inject to the probes).
StatusOr<std::vector<InjectionSpec>> parseInjections(const std::string& text);

}  // namespace nanprov::probes
