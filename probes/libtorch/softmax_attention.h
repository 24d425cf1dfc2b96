// Attention written in plain ops, found by what it computes, whoever wrote it and in whatever
// notation: a softmax over the keys of scores that a matmul of two activations made (bmm or
// baddbmm; torch.matmul, @ and einsum with any subscripts reach bmm), scaled, biased, masked,
// softcapped, cast, cloned or rearranged on the way, whose probabilities then meet a third
// activation in a matmul (V) is one attention call: op `softmax_attention`, backend
// `plain_softmax` (replay reruns it so). Its roles are the real ones, in the matmuls' own order:
// Q and K (the first matmul's operands, as they were), the scores S (with whatever bias or mask
// they carry) and P laid out as that product (score_layout.h: einsum's layouts, heads folded into
// the batch or into the rows), V and O (the second matmul's); in training its backward gives dQ,
// dK and dV through tensor hooks (backward_watch.h).
//
// Linked by what this thread ran, not by autograd history, so that no_grad and inference_mode
// calls are found too: each matmul of two 3-d tensors is remembered (its operands, until the next
// one), a softmax whose input lays that product out with the softmax over its keys takes it as its
// scores, and the next matmul that reads its probabilities ends the call. With gradients on, the scores' history must
// also show the matmul of activations. Replay derives the additive bias from S (replay/score_bias.h).
//
// Cheap by design: only aten::bmm, aten::baddbmm and aten::_softmax are wrapped, at BackendSelect
// as the fused ops are; outside a session, inside a call nanprov already probes, or in autograd's
// backward, each redispatches at once; otherwise a matmul costs two tensor references. Attention
// nanprov probes otherwise (SDPA, the MHA and Hugging Face eager probes) runs inside a call it is
// recording and is not looked at. A softmax that looks like attention but whose call could not be
// followed to its end (or whose scores do not lay its product out) is counted as unchecked
// attention, named by its module with the --probe-module that checks it: the report then never
// says "outside attention" (report/outcome.h).
#pragma once

namespace nanprov::probes {

class Session;

// Called once from installProbes() (install_probes.h).
void installSoftmaxAttentionProbe();

// At a step boundary: a call half seen on this thread (no matmul with V came) is dropped, and
// counted in `session` as attention not checked. Registered with forgetAtStepBoundary
// (probe_thread.h), which the probes' flush calls.
void forgetSoftmaxAttention(Session& session);

}  // namespace nanprov::probes
