"""What only Python knows about steps: when an optimizer stepped, and which gradients it applied."""

import importlib
import os
import sys
import weakref


def watch(lib, torch, modules, say, before_step=lambda: None, replicas=None):
    """Step = the most steps any one optimizer has taken, so two optimizers do not count twice.

    After each optimizer step the gradient sentinel checks the gradients it applied and the
    parameters it produced (torch.ops.nanprov.check_step: asynchronous fused checks), so a NaN made
    outside attention is named at its own step. An optimizer's parameters and their names are
    handed over once (watch_parameters), and again when its parameter groups change: a step then
    costs one call with two integers, not a walk over every parameter. Sharded parameters (FSDP2's
    DTensors) are the exception: their local shards, and their gradients', are handed over at each
    step (two attribute reads per sharded parameter; no collective), because a DTensor's gradient
    is a new DTensor every step and only Python can reach a DTensor's local shard. The parameters
    DDP replicates (`replicas`, replicas.Replicas) are handed over with their group's ranks: the
    sentinel digests them after each step, for the report to compare across ranks.
    """
    taken = weakref.WeakKeyDictionary()
    watched = weakref.WeakKeyDictionary()  # optimizer -> the layout of its groups when handed over
    sharded = weakref.WeakKeyDictionary()  # optimizer -> weak references to its sharded parameters
    high = [0]
    watch_parameters, check_step = torch.ops.nanprov.watch_parameters, torch.ops.nanprov.check_step
    sentinel = os.environ.get("NANPROV_SENTINEL", "1") != "0"
    failed = []

    def hand_over(optimizer, layout, frame):
        if not modules.named_from_stack:
            modules.name_from_stack(frame)
        params = [p for group in optimizer.param_groups for p in group["params"]]
        names = [modules.parameter_name(p) for p in params]
        if not all(names):  # parameters made after the model was first named (FSDP2 shards them)
            modules.name_from_stack(frame)
            names = [modules.parameter_name(p) for p in params]
        positions = [i for i, p in enumerate(params) if local_shard(p) is not None]
        replicated, ranks = replicas.of(params) if replicas is not None else ([], [])
        watch_parameters(id(optimizer), params, "\n".join(names), positions, replicated, ranks)
        sharded[optimizer] = [weakref.ref(params[i]) for i in positions]
        watched[optimizer] = layout

    def shards_of(optimizer):
        out = []
        for ref in sharded.get(optimizer, ()):
            p = ref()
            out.append(local_shard(p))
            out.append(local_shard(getattr(p, "grad", None)))
        return out

    def after_step(optimizer, args, kwargs):
        n = taken.get(optimizer, 0) + 1
        taken[optimizer] = n
        if sentinel:
            try:
                # A group added, or a group's list replaced or grown: hand the parameters over again.
                layout = tuple((id(group["params"]), len(group["params"])) for group in optimizer.param_groups)
                if watched.get(optimizer) != layout:
                    hand_over(optimizer, layout, sys._getframe(1))
                if not check_step(id(optimizer), n - 1, shards_of(optimizer)):  # forgotten: hand over again
                    hand_over(optimizer, layout, sys._getframe(1))
                    check_step(id(optimizer), n - 1, shards_of(optimizer))
            except Exception as exc:  # never reaches the training; said once, not every step
                if not failed:
                    failed.append(exc)
                    say(f"gradient sentinel failed, gradients are not checked: {exc}")
        if n > high[0]:
            high[0] = n
            before_step()  # a process group made where nanprov did not see it: known before the step ends
            lib.nanprov_step(n)

    importlib.import_module("torch.optim.optimizer").register_optimizer_step_post_hook(after_step)


def local_shard(t):
    """This rank's local shard of a sharded tensor (a DTensor's `_local_tensor`: the tensor itself,
    no collective, no copy), or None for a plain tensor or None."""
    return getattr(t, "_local_tensor", None) if t is not None else None
