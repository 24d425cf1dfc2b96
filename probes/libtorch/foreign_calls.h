// Attention that runs no ATen op nanprov can wrap: FlexAttention's higher-order op, FlashAttention-4's
// autograd functions, any module under --probe-module. The bootstrap brackets each such call with
// ops of the `nanprov` library (torch.ops.nanprov.*):
//   begin_call(q, o?, boundary=False)
//                            before it runs: names it (a backward when o, its forward's output, is
//                            given) and traces its kernels from here on; `boundary` when the
//                            bracket is a module's (--probe-module), not the attention call itself;
//   record_call(...)         after a forward ran: checks, records and captures it (an attention
//                            mask, when given, is judged as SDPA's is: its fully masked rows are
//                            counted; a bias the call made itself is only captured; its backward
//                            finds it by O's address, or by `link`'s when the call saved a copy of O);
//   record_backward(...)     after a backward ran: the same, linked to its forward by O;
//   abandon_call()           when the call raised: ends the bracket, records nothing;
//   checked_inside()         whether a call nanprov checked ran inside the innermost bracket (a
//                            module probe whose module ran SDPA or softmax attention records nothing
//                            of its own: the call inside it was recorded with its real Q, K, V).
// A record without a begin is recorded with its kernels unattributed. The same ops run inside
// compiled graphs, where the bootstrap's Inductor pass puts them around FlexAttention's nodes.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

#include "probes/core/call_identity.h"

namespace nanprov {

// Defines the ops above. Called once, from installAttentionProbes().
void installForeignCallOps();

// Forward calls recorded on this thread so far: the bootstrap counts, around a compiled graph,
// which of its FlexAttention calls were recorded and which went unseen.
int64_t foreignCallsRecorded();

// True while a bracket that records an attention call with its real Q, K, V is open on this thread
// (the MHA, Hugging Face eager, FlashAttention and FlexAttention probes): attention computed
// inside is that call's. A module's boundary (--probe-module) is not such a bracket: attention
// found inside it is recorded as a call of its own.
bool insideRecordedCall();

// A checked call was recorded on this thread: every bracket open around it learns so.
void noteCheckedCall();

// The name of the module boundary this thread's innermost bracket is, for the first forward call
// inside it: that call is the module's attention (its real Q, K, V), so it is named as the module's
// call once, not twice (and its kernels, traced from the boundary on, are its own). nullopt when
// the innermost bracket is not an unclaimed, named boundary.
std::optional<CallName> claimBoundaryName();

// A softmax ran on this thread over `scores`. When the innermost bracket is a module's boundary
// (--probe-module) whose attention nanprov did not find inside, the scores of its largest softmax
// are kept and recorded as the module call's S: its logit trend then reads the logits the module
// computed, not a bound from its arguments (which may be its hidden states, not its Q and K).
// Held until the module's call is recorded or abandoned.
void noteSoftmaxInside(const at::Tensor& scores);

// At a step boundary: a bracket still open on this thread belongs to a call that raised past the
// bootstrap (no bracket spans an optimizer step); it is closed so later kernels are not its.
void closeStaleForeignCalls();

}  // namespace nanprov
