// Fault injection (`nanprov run --inject 'layer=3,phase=bwd,tensor=dQ,step=5,value=nan'`):
// which output of which call to corrupt. It exists to test nanprov and a user's setup; it acts
// only when asked, and the store marks the call as injected.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "probes/call_selector.h"
#include "probes/roles.h"
#include "store/status.h"

namespace nanprov {

struct InjectionSpec {
  Role tensor = Role::kO;
  double value = 0.0;                  // NaN, +Inf or -Inf
  CallSelector where;
};

// One spec: comma-separated key=value pairs. Keys: tensor (required), value (nan|inf|-inf,
// default nan), rank, layer, step, call, phase (fwd|bwd). The tensor must be an output of the
// phase, because injection corrupts what the kernel produced.
StatusOr<InjectionSpec> parseInjection(const std::string& text);

// Several specs separated by ';' (how `nanprov run` passes repeated --inject to the probes).
StatusOr<std::vector<InjectionSpec>> parseInjections(const std::string& text);

}  // namespace nanprov
