"""What only Python knows about steps: when an optimizer stepped, and which gradients it applied."""
import importlib
import os
import sys
import weakref


def watch(lib, torch, modules, say):
    """Step = the most steps any one optimizer has taken, so two optimizers do not count twice.

    After each optimizer step the gradient sentinel checks the gradients it applied and the
    parameters it produced (torch.ops.nanprov.check_step: asynchronous fused checks), so a NaN made
    outside attention is named at its own step. An optimizer's parameters and their names are
    handed over once (watch_parameters), and again when its parameter groups change: a step then
    costs one call with two integers, not a walk over every parameter.
    """
    taken = weakref.WeakKeyDictionary()
    watched = weakref.WeakKeyDictionary()  # optimizer -> the layout of its groups when handed over
    high = [0]
    watch_parameters, check_step = torch.ops.nanprov.watch_parameters, torch.ops.nanprov.check_step
    sentinel = os.environ.get("NANPROV_SENTINEL", "1") != "0"
    failed = []

    def hand_over(optimizer, layout, frame):
        if not modules.named_from_stack:
            modules.name_from_stack(frame)
        params = [p for group in optimizer.param_groups for p in group["params"]]
        watch_parameters(id(optimizer), params, "\n".join(modules.parameter_name(p) for p in params))
        watched[optimizer] = layout

    def after_step(optimizer, args, kwargs):
        n = taken.get(optimizer, 0) + 1
        taken[optimizer] = n
        if sentinel:
            try:
                # A group added, or a group's list replaced or grown: hand the parameters over again.
                layout = tuple((id(group["params"]), len(group["params"])) for group in optimizer.param_groups)
                if watched.get(optimizer) != layout:
                    hand_over(optimizer, layout, sys._getframe(1))
                if not check_step(id(optimizer), n - 1):  # forgotten by the probes: hand over again
                    hand_over(optimizer, layout, sys._getframe(1))
                    check_step(id(optimizer), n - 1)
            except Exception as exc:  # never reaches the training; said once, not every step
                if not failed:
                    failed.append(exc)
                    say(f"gradient sentinel failed, gradients are not checked: {exc}")
        if n > high[0]:
            high[0] = n
            lib.nanprov_step(n)

    importlib.import_module("torch.optim.optimizer").register_optimizer_step_post_hook(after_step)
