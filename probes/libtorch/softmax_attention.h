// Attention written in plain ops, found by its shape and checked, whoever wrote it: a softmax over
// the last dim of scores that a matmul of two activations made (bmm or baddbmm; torch.matmul and
// einsum reach bmm), scaled, biased, masked, softcapped or cast on the way, whose probabilities
// then meet a third activation in a matmul (V) is one attention call: op `softmax_attention`,
// backend `plain_softmax` (replay reruns it so). Its roles are the real ones: Q and K (the first
// matmul's operands, as they were), the scores S (with whatever bias or mask they carry), P, V and
// O; in training its backward gives dQ, dK and dV through tensor hooks (backward_watch.h).
//
// Linked by what this thread ran, not by autograd history, so that no_grad and inference_mode
// calls are found too: each matmul of two 3-d tensors is remembered (its operands, until the next
// one), a softmax whose input has that product's shape takes it as its scores, and the next matmul
// that reads its probabilities ends the call. With gradients on, the scores' history must also
// show the matmul of activations. Replay derives the additive bias from S (replay/score_bias.h).
//
// Cheap by design: only aten::bmm, aten::baddbmm and aten::_softmax are wrapped, at BackendSelect
// as the fused ops are; outside a session, inside a call nanprov already probes, or in autograd's
// backward, each redispatches at once; otherwise a matmul costs two tensor references. Attention
// nanprov probes otherwise (SDPA, the MHA and Hugging Face eager probes) runs inside a call it is
// recording and is not looked at. A softmax that looks like attention but whose call could not be
// followed to its end is counted as unchecked attention, as before.
#pragma once

namespace nanprov {

class Session;

// Called once from installAttentionProbes().
void installSoftmaxAttentionProbe();

// At a step boundary: a call half seen on this thread (no matmul with V came) is dropped, and
// counted in `session` as attention not checked.
void forgetSoftmaxAttention(Session& session);

}  // namespace nanprov
