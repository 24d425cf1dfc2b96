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

namespace nanprov::probes {

// Defines the ops above. Called once, from installProbes() (install_probes.h). What a bracket
// leaves on its thread (whether a call is inside one, the module boundary's name) is the
// thread's state: probe_thread.h.
void installForeignCallOps();

}  // namespace nanprov::probes
