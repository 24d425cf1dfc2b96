// The module trail's ops (--trail): what the bootstrap's module hooks, and the checks it puts
// into compiled graphs, call, served by the process's ModuleTrail (module_trail.h).
#pragma once

namespace nanprov::probes {

// Registers the ops the bootstrap calls, served by the process's trail (processProbes().trail()):
//   torch.ops.nanprov.trail_module(id, path, cls, unchecked="") -> bool (it looks like attention)
//   torch.ops.nanprov.trail_enter(id), trail_leave(id)   (a call of an attention-like module begins, ends)
//   torch.ops.nanprov.trail_forward(id, inputs, outputs, inputs_whole=True)
// and, for checks the bootstrap puts into compiled graphs (compiled_trail.py):
//   torch.ops.nanprov.trail_compiled(slot, inputs, outputs)
//   torch.ops.nanprov.trail_graph_enter(base), torch.ops.nanprov.trail_graph_exit()
//   torch.ops.nanprov.trail_compiled_backward(id, received, sent), trail_backward_unchecked(id, unchecked),
//   torch.ops.nanprov.trail_backward_off(first, count),
//   torch.ops.nanprov.trail_backward_state(checked)
void installModuleTrail();

}  // namespace nanprov::probes
