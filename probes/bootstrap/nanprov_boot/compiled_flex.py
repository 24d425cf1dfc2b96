"""FlexAttention inside torch.compile'd code, forward and backward.

Inductor turns a compiled FlexAttention call into Triton template kernels: no op nanprov can wrap
runs at run time. So an Inductor post-grad pass puts nanprov's own ops around each FlexAttention
node of the forward and backward graphs, after AOTAutograd split them:
    begin_call(q, None) · flex_attention · record_call(q, k, v, out, ...)
    begin_call(q, out)  · flex_attention_backward · record_backward(q, k, v, out, dO, dQ, dK, dV, ...)
The inserted ops only read the node's tensors; they are marked side-effecting so Inductor keeps
them, and between the two brackets run the call's own kernels, which CUPTI then attributes to it.
The score_mod and block mask are not materialised here (the eager probe does that); the capture
says so, and replay runs plain attention.

A user's own post-grad pass keeps running, before ours. The pass is part of Inductor's cache key,
so graphs compiled without nanprov are never reused with it, nor the reverse.
"""

import operator

from .eager_flex import kernel_backend

_NOTE = (
    "compiled FlexAttention: its score_mod and block mask were not materialised (run it eagerly "
    "to capture them); replayed as plain attention, which differs from the call where they act"
)
_state = {"installed": False}


def installed():
    return _state["installed"]


def _getitem(graph, node, index):
    """The node's `index`-th output, from an existing getitem or a new one placed right after it."""
    for user in node.users:
        if user.op == "call_function" and user.target is operator.getitem and user.args[1] == index:
            return user
    with graph.inserting_after(node):
        item = graph.call_function(operator.getitem, (node, index))
    item.meta["val"] = node.meta["val"][index] if "val" in node.meta else None
    return item


def _last(graph, nodes):
    order = {n: i for i, n in enumerate(graph.nodes)}
    return max(nodes, key=lambda n: order[n])


class _Pass:
    """The post-grad pass; also callable where torch expects a plain function."""

    def __init__(self, torch, chained):
        self.chained = chained
        self.forward = torch.ops.higher_order.flex_attention
        self.backward = getattr(torch.ops.higher_order, "flex_attention_backward", None)
        self.begin = torch.ops.nanprov.begin_call.default
        self.record = torch.ops.nanprov.record_call.default
        self.record_backward = torch.ops.nanprov.record_backward.default

    def __call__(self, graph):
        if self.chained is not None:
            self.chained(graph)
        for node in list(graph.nodes):
            if node.op != "call_function":
                continue
            if node.target is self.forward:
                self._forward(graph, node)
            elif self.backward is not None and node.target is self.backward:
                self._backward(graph, node)

    def _forward(self, graph, node):
        q, k, v, _score_mod, _block_mask, scale = node.args[:6]
        out = _getitem(graph, node, 0)
        self._bracket(
            graph,
            node,
            (q, None),
            self.record,
            (q, k, v, out, None, scale, False, "bhsd", None, None, "flex_attention", "flex", _NOTE),
            [out],
            kernel_backend(node.args[6] if len(node.args) > 6 else None),
        )

    def _backward(self, graph, node):
        q, k, v, out, _lse, grad_out = node.args[:6]
        scale = node.args[10] if len(node.args) > 10 else None
        grads = [_getitem(graph, node, i) for i in range(3)]
        self._bracket(
            graph,
            node,
            (q, out),
            self.record_backward,
            (q, k, v, out, grad_out, *grads, scale, False, "bhsd", None, None, "flex_attention", "flex"),
            grads,
            kernel_backend(node.args[11] if len(node.args) > 11 else None),
        )

    def _bracket(self, graph, node, begin_args, record_op, record_args, after, kernel_backend):
        """begin_call right before `node`, the record right after the last of `after`."""
        with graph.inserting_before(node):
            graph.call_function(self.begin, begin_args).meta["val"] = None
        with graph.inserting_after(_last(graph, after)):
            graph.call_function(record_op, record_args, {"kernel_backend": kernel_backend}).meta["val"] = None

    def uuid(self):
        chained = self.chained.uuid() if hasattr(self.chained, "uuid") else repr(self.chained)
        return f"nanprov-compiled-flex-2:{chained}"


def install(torch, config, say):
    """Sets Inductor's post-grad custom pass, chaining any the user set before."""
    try:
        base = __import__("torch._inductor.custom_graph_pass", fromlist=["CustomGraphPass"]).CustomGraphPass
        has_side_effect = torch.fx.node.has_side_effect
        ops = torch.ops.nanprov
        for op in (ops.begin_call.default, ops.record_call.default, ops.record_backward.default):
            has_side_effect(op)
        cls = type("NanprovCompiledFlex", (_Pass, base), {})
        config.post_grad_custom_post_pass = cls(torch, config.post_grad_custom_post_pass)
        _state["installed"] = True
    except Exception as e:  # compiled FlexAttention is then counted as unprobed, never wrong
        say(f"compiled FlexAttention is not probed ({type(e).__name__}: {e}); its calls are counted as unprobed")
