// Attention found by its shape: a softmax over the last dim of a score tensor that a matmul of
// two activations made (bmm/matmul/baddbmm → _softmax → matmul), whoever wrote it. nanprov cannot
// check such a call (it has no Q, K, V and no O of its own, so it could not tell a call that made
// a NaN from one that received it, nor replay it), so it counts it as unchecked attention, named
// by the module that ran it and the --probe-module that would check it. The report then never
// calls a run clean, nor blames code outside attention, for a step in which it ran.
//
// Cheap by design: only aten::_softmax is wrapped (at BackendSelect, as the fused ops are), and
// only a softmax over the last dim of a tensor of 3 or more dims with an autograd history is
// looked at; the walk up that history stops after a few nodes. Attention nanprov probes (SDPA,
// the MHA and Hugging Face eager probes, --probe-module brackets) runs its softmax inside a call
// nanprov is recording, and is not counted. Without gradients (no_grad, inference) the history
// is absent and nothing is counted.
#pragma once

namespace nanprov {

// Called once from installAttentionProbes().
void installSoftmaxAttentionCount();

}  // namespace nanprov
