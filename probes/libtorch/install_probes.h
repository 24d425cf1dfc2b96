// installProbes: every probe of the library into the dispatcher and the `nanprov` op library, in
// one place, so that no entry point includes another: the attention ops' wrappers
// (attention_hook.h), and within them the gradient sentinel's, the collectives', the trail's and
// the brackets' ops, and the softmax attention probe. Called by nanprov_start (entry.cpp).
#pragma once

#include "base/status.h"

namespace nanprov::probes {

// Idempotent; an error says what could not be installed.
Status installProbes();

}  // namespace nanprov::probes
