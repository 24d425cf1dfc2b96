"""The compiled backward's module for each node (compiled_trail._BackwardModules), on the real
post-grad backward graph of the trail script's MLP compiled on the CPU: its hand-written
autograd.Function's backward belongs to `act`, whether torch marks those nodes autograd_backward
(2.13) or not (2.11, where the GPU machine saw them named after c_proj, the one module that made
what they take: the single-maker rule meant for Inductor's metadata-less nodes); and no module's
check reads a forward value recomputed in the backward as a gradient it sent.

Usage: backward_modules_test.py BOOTSTRAP_DIR E2E_SCRIPTS_DIR
"""
import sys

import torch


def main():
    sys.path[:0] = [sys.argv[1], sys.argv[2]]
    from nanprov_boot import compiled_trail
    import trail_faults

    graphs = []

    class Keep(__import__("torch._inductor.custom_graph_pass", fromlist=["CustomGraphPass"]).CustomGraphPass):
        def __call__(self, graph):
            if compiled_trail._is_backward(graph):
                graphs.append(graph)

        def uuid(self):
            return None  # never cached: every compile runs the pass

    torch._inductor.config.post_grad_custom_post_pass = Keep()
    torch._dynamo.config.cache_size_limit = 8
    model = trail_faults.MLP(16, "blow-up")
    torch.compile(model)(torch.randn(2, 8, 16)).sum().backward()
    assert len(graphs) == 1, f"expected one backward graph, got {len(graphs)}"
    graph = graphs[0]

    def module_of(modules, node):
        stack = modules(node)
        return list(stack.values())[-1][0] if stack else None

    # The Function's backward: the nodes traced from trail_faults.py's `backward`.
    function = [n for n in graph.nodes if n.op == "call_function" and ", in backward" in (n.meta.get("stack_trace") or "")]
    assert len(function) >= 5, f"the Function's backward is not in the graph: {[n.name for n in graph.nodes]}"
    failures = []
    for torch_version, strip in (("2.13, marked", False), ("2.11, unmarked", True)):
        if strip:
            for n in graph.nodes:
                n.meta.pop("autograd_backward", None)
        modules = compiled_trail._BackwardModules(graph)
        named = {n.name: module_of(modules, n) for n in function}
        wrong = {name: m for name, m in named.items() if m is None or not m.endswith("act")}
        print(f"{torch_version}: {named}")
        if wrong:
            failures.append(f"{torch_version}: not named act: {wrong}")
    # A module's backward check reads only what the gradients reached: the forward values the
    # partitioner recomputed in the backward (the GELU's, kept in the act's stack) are not
    # gradients the module sent.
    reached = compiled_trail._from_gradients(graph)
    g = compiled_trail._Graph(graph, torch.Tensor)
    checks, _ = compiled_trail._module_checks(g, compiled_trail._BackwardModules(graph), compiled_trail.NO_MODULE,
                                              backward=True, gradients=reached)
    recomputed = [n for n in graph.nodes if n.op == "call_function" and n not in reached]
    assert recomputed, "the partitioner recomputed nothing: the check below would prove nothing"
    for _, _, (path, _), _, outputs, _, _ in checks:
        sent = [n.name for n in outputs if n not in reached]
        if sent:
            failures.append(f"{path}'s backward check reads forward values as sent gradients: {sent}")
    if failures:
        sys.exit("\n".join(failures))
    print("ok")


if __name__ == "__main__":
    main()
