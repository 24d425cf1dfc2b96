"""Module paths inside torch.compile'd code, FlexAttention a compiled graph ran unseen, and the
trail's checks inside compiled graphs."""

import sys

from . import compiled_flex, compiled_trail, trail
from .module_paths import dynamo_path

# Graph nodes that make one probed attention call each at run time (the fast-path encoder layer
# makes its one through the MHA op inside it).
_PROBED_IN_GRAPHS = ("scaled_dot_product", "_native_multi_head_attention", "_transformer_encoder_layer_fwd")
# Attention a compiled graph may hold that runs as no probed ATen op at run time: probed only
# where compiled_flex's Inductor pass brackets it, counted as unprobed where it did not.
_FOREIGN_IN_GRAPHS = ("flex_attention",)


class _CompiledGraph:
    """One graph Dynamo compiled: its attention calls' module paths, in graph order, and how many
    calls of each foreign kind (FlexAttention) it holds."""

    def __init__(self, gm, foreign_probed):
        self.paths, self.foreign = [], {}
        for node in gm.graph.nodes:
            name = getattr(node.target, "__name__", str(node.target))
            if node.op != "call_function":
                continue
            # By name and by text: a higher-order op's __name__ differs across torch versions
            # ("flex_attention", or only str(target) names it).
            foreign = [u for u in _FOREIGN_IN_GRAPHS if u in name or u in str(node.target)]
            if foreign and "backward" not in name:
                self.foreign[foreign[0]] = self.foreign.get(foreign[0], 0) + 1
            if any(probed in name for probed in _PROBED_IN_GRAPHS) or (foreign and foreign_probed):
                stack = node.meta.get("nn_module_stack") or {}
                entries = list(stack.values())
                self.paths.append(dynamo_path(entries[-1][0]) if entries else "")
        self.next = 0


def watch(lib, torch, output_graph, modules):
    """Module paths inside torch.compile'd code, where no module frame runs.

    Every graph Dynamo hands to a backend is read once for the module path of each attention
    node (its nn_module_stack); the compiled function is wrapped so that, while it runs, the
    attention calls it makes are named in that order. The compiled code itself is untouched.
    """
    cls = output_graph.OutputGraph
    original = cls.call_user_compiler
    if trail.enabled():
        trail.keep_out_of_dynamo_frames(torch._dynamo.eval_frame)

    def call_user_compiler(self, gm, *args, **kwargs):
        trailed = None
        # torch.export traces through here too: an exported program must not carry the checks.
        if trail.enabled() and not getattr(self, "export", False):
            # Its modules run no hook: their forward is checked from inside the graph where that
            # cannot change what it computes, their backward not at all; the report says so.
            lib.nanprov_trail_compiled()
            try:
                trailed = compiled_trail.instrument(gm, torch)
            except Exception as exc:  # the graph as Dynamo made it
                trail.say_once(
                    "instrument", f"--trail: a compiled graph's modules are not checked ({type(exc).__name__}: {exc})"
                )
        try:
            compiled = original(self, gm, *args, **kwargs)
        except Exception as exc:
            # Dynamo's own signals (restart the analysis, shorten a traceback) pass through; a
            # backend that could not take the checks gets the graph as Dynamo made it. If that
            # fails too, the failure was not the checks': the user sees their own error.
            if trailed is None or type(exc).__name__ not in ("BackendCompilerFailed", "Unsupported"):
                raise
            try:
                trailed.remove()
                trailed = None
                compiled = original(self, gm, *args, **kwargs)
            except Exception:
                raise exc from None
            trail.say_once(
                "backend", f"--trail: a compiled graph's modules are not checked ({type(exc).__name__}: {exc})"
            )
        try:
            graph = _CompiledGraph(gm, compiled_flex.installed())
        except Exception:
            return compiled
        if not graph.paths and not graph.foreign and trailed is None:
            return compiled
        ops = torch.ops.nanprov

        def run(*a, **k):
            stack = getattr(modules.compiled, "stack", None)
            if stack is None:
                stack = modules.compiled.stack = []
            entered = False
            if trailed is not None:
                try:  # the module the graph runs from names its modules; before this graph is on the stack
                    ops.trail_graph_enter(trailed.base(modules.eager_path(sys._getframe(1))))
                    entered = True
                except Exception:  # its checks then find no base and check nothing
                    pass
            graph.next = 0
            stack.append(graph)
            recorded_before = lib.nanprov_foreign_calls()
            lib.nanprov_compiled_grad_mode(1 if torch.is_grad_enabled() else 0)
            try:
                return compiled(*a, **k)
            finally:
                lib.nanprov_compiled_grad_mode(-1)
                stack.pop()
                if entered:
                    ops.trail_graph_exit()
                # FlexAttention calls recorded while the graph ran: bracketed by compiled_flex's
                # pass, or run eagerly (the eager backend); the rest went unseen.
                unseen = sum(graph.foreign.values()) - (lib.nanprov_foreign_calls() - recorded_before)
                for what, n in graph.foreign.items():
                    n = min(n, unseen)
                    if n > 0:
                        lib.nanprov_count_unprobed(what.encode(), n)
                        unseen -= n

        run.__wrapped__ = compiled
        return run

    cls.call_user_compiler = call_user_compiler
