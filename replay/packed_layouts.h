// FlashAttention's layouts, turned into the [batch, heads, seq, dim] call every backend and the
// reference replay: (B, S, H, D) tensors are transposed; packed sequences ("thd": (total, H, D)
// with cu_seqlens_q/k) are unpacked into a zero-padded batch whose mask hides the padding keys.
// Padded rows are no part of the call: after each run they are zeroed in every output, so they
// compare equal everywhere.
#pragma once

#include "base/status.h"
#include "replay/backends.h"
#include "replay/captured_call.h"

namespace nanprov::replay {

// Reads arg.layout ("bhsd" when absent) and rewrites the call's tensors in place. FlashAttention's
// causal mask is aligned to the bottom right; where s_q != s_kv it becomes an explicit mask.
Status toHeadsFirst(CapturedCall& call);

// Zeroes, in `out`, the padded query rows (O, LSE, dQ) and key rows (dK, dV) of an unpacked call.
void zeroPadding(const CapturedCall& call, Outputs& out);

}  // namespace nanprov::replay
