// The gradient sentinel's ops: what the bootstrap's optimizer-step hook calls, served by the
// process's GradientSentinel (gradient_sentinel.h).
#pragma once

namespace nanprov::probes {

// Registers the ops the bootstrap calls, served by the process's sentinel (processProbes().sentinel()):
//   torch.ops.nanprov.watch_parameters(key, params, names, sharded, replicated=[], replica_ranks=[])
//   torch.ops.nanprov.check_step(key, step, shards) -> bool   (false: watch `key` again)
void installGradientSentinel();

}  // namespace nanprov::probes
