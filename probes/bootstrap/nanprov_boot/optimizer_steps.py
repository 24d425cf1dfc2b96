"""What only Python knows about steps: when an optimizer stepped, and which gradients it applied."""
import importlib
import os
import sys
import weakref


def watch(lib, torch, modules, say):
    """Step = the most steps any one optimizer has taken, so two optimizers do not count twice.

    After each optimizer step the gradient sentinel checks the gradients it applied and the
    parameters it produced (torch.ops.nanprov.check_step: one asynchronous fused check), so a
    NaN made outside attention is named at its own step.
    """
    taken = weakref.WeakKeyDictionary()
    high = [0]
    check_step = torch.ops.nanprov.check_step
    sentinel = os.environ.get("NANPROV_SENTINEL", "1") != "0"
    failed = []

    def after_step(optimizer, args, kwargs):
        n = taken.get(optimizer, 0) + 1
        taken[optimizer] = n
        if sentinel:
            try:
                grads, params, names = [], [], []
                if not modules.named_from_stack:
                    modules.name_from_stack(sys._getframe(1))
                for group in optimizer.param_groups:
                    for p in group["params"]:
                        if p.grad is not None and not p.grad.is_sparse:
                            grads.append(p.grad)
                            params.append(p)
                            names.append(modules.parameter_name(p))
                if grads:
                    check_step(grads, params, "\n".join(names), n - 1)
            except Exception as exc:  # never reaches the training; said once, not every step
                if not failed:
                    failed.append(exc)
                    say(f"gradient sentinel failed, gradients are not checked: {exc}")
        if n > high[0]:
            high[0] = n
            lib.nanprov_step(n)

    importlib.import_module("torch.optim.optimizer").register_optimizer_step_post_hook(after_step)
