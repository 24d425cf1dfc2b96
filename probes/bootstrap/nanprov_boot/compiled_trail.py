"""`nanprov run --trail` inside torch.compile'd code, where no module hook runs.

Before the backend compiles a graph Dynamo traced, a call of torch.ops.nanprov.trail_compiled
is put after each module's outputs: the module's tensors that a node outside it uses, with the
tensors it took from outside (its inputs; parameters and buffers left out). The module is known
from each node's nn_module_stack, the same record the attention probes name compiled calls by.
The op is marked side-effecting, so the compiler keeps it though nothing uses its result; it only
reads. At run time the graph's wrapper (compiled_graphs.py) gives the probes the number of the
graph's first module for the place it runs from: one graph Dynamo compiled from a block's forward
serves every block. Only the forward is checked: the backward of compiled code runs as one
compiled graph, with no module boundaries left in it.
"""
from . import trail
from .module_paths import dynamo_path


def _class_name(cls):
    return cls.__name__ if isinstance(cls, type) else str(cls).rsplit(".", 1)[-1]


def _weight(node):
    """A parameter or buffer of the model: Dynamo lifts them to graph inputs named for them."""
    return node.op == "get_attr" or (node.op == "placeholder" and ("_parameters_" in node.name or "_buffers_" in node.name))


class Plan:
    """A graph's modules, numbered in the order their checks run: (path within the graph, class)."""

    def __init__(self, gm):
        self.gm = gm
        self.modules = []
        self.nodes = []  # the checks put into the graph
        self.bases = {}  # the eager path the graph runs from -> the number of its first module

    def base(self, prefix):
        """The number of the graph's first module when it runs from the module at `prefix`."""
        first = self.bases.get(prefix)
        if first is None:
            named = [(f"{prefix}.{inside}" if prefix and inside else (prefix or inside), cls) for inside, cls in self.modules]
            first = self.bases[prefix] = trail.numbers.take(named)
        return first

    def remove(self):
        """Takes the checks out of the graph again: it is what Dynamo made."""
        for node in reversed(self.nodes):
            self.gm.graph.erase_node(node)
        self.nodes = []
        self.gm.recompile()


def instrument(gm, torch):
    """Puts the trail's check into `gm` after each module's outputs. Returns the Plan, or None
    when the graph holds no module output to check."""
    check = torch.ops.nanprov.trail_compiled.default
    torch.fx.node.has_side_effect(check)
    tensor_type = torch.Tensor
    graph = gm.graph
    order = {node: i for i, node in enumerate(graph.nodes)}
    members, described = {}, {}
    for node in graph.nodes:
        if node.op in ("placeholder", "get_attr", "output"):
            continue
        for key, (path, cls) in (node.meta.get("nn_module_stack") or {}).items():
            members.setdefault(key, set()).add(node)
            described.setdefault(key, (dynamo_path(path), _class_name(cls)))

    def is_tensor(node):
        return isinstance(node.meta.get("example_value"), tensor_type)

    checks = []
    for key, inside in members.items():
        outputs = sorted((n for n in inside if is_tensor(n) and any(u not in inside for u in n.users)), key=order.get)
        if not outputs:
            continue
        inputs = sorted({a for n in inside for a in n.all_input_nodes if a not in inside and is_tensor(a) and not _weight(a)},
                        key=order.get)
        after = max(outputs + inputs, key=order.get)
        checks.append((order[after], -len(inside), key, inputs, outputs, after))
    if not checks:
        return None
    plan = Plan(gm)
    # In graph order; after one node, outer modules first: each insert lands right after the node,
    # so the innermost module's check runs first, as its forward hook would in eager mode.
    try:
        for _, _, key, inputs, outputs, after in sorted(checks, key=lambda c: c[:2]):
            with graph.inserting_after(after):
                plan.nodes.append(graph.call_function(check, (len(plan.modules), inputs, outputs)))
            plan.modules.append(described[key])
        gm.recompile()
    except Exception:
        plan.remove()  # never half a graph's checks
        raise
    return plan
