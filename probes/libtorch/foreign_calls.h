// Attention that runs no ATen op nanprov can wrap: FlexAttention's higher-order op, FlashAttention-4's
// autograd functions, any module under --probe-module. The bootstrap brackets each such call with
// ops of the `nanprov` library (torch.ops.nanprov.*):
//   begin_call(q, o?)        before it runs: names it (a backward when o, its forward's output, is
//                            given) and traces its kernels from here on;
//   record_call(...)         after a forward ran: checks, records and captures it (an attention
//                            mask, when given, is judged as SDPA's is: its fully masked rows are
//                            counted; a bias the call made itself is only captured; its backward
//                            finds it by O's address, or by `link`'s when the call saved a copy of O);
//   record_backward(...)     after a backward ran: the same, linked to its forward by O;
//   abandon_call()           when the call raised: ends the bracket, records nothing.
// A record without a begin is recorded with its kernels unattributed. The same ops run inside
// compiled graphs, where the bootstrap's Inductor pass puts them around FlexAttention's nodes.
#pragma once

#include <cstdint>

namespace nanprov {

// Defines the ops above. Called once, from installAttentionProbes().
void installForeignCallOps();

// Forward calls recorded on this thread so far: the bootstrap counts, around a compiled graph,
// which of its FlexAttention calls were recorded and which went unseen.
int64_t foreignCallsRecorded();

// True while a bracket nanprov is recording is open on this thread (a module probe, the MHA or
// Hugging Face eager probes): attention computed inside is that call's, not attention unchecked.
bool insideRecordedCall();

// At a step boundary: a bracket still open on this thread belongs to a call that raised past the
// bootstrap (no bracket spans an optimizer step); it is closed so later kernels are not its.
void closeStaleForeignCalls();

}  // namespace nanprov
