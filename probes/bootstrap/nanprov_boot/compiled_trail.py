"""`nanprov run --trail` inside torch.compile'd code, where no module hook runs.

Before the backend compiles a graph Dynamo traced, a call of torch.ops.nanprov.trail_compiled is
put after each module's outputs, the module known from each node's nn_module_stack (the record the
attention probes name compiled calls by). It reads only values that Inductor writes to memory
anyway: the graph's inputs and outputs, and the operands of matrix products and convolutions,
which run as kernels of their own that read their operands from memory. Any other value may live
only inside a fused kernel, in fp32 where the model is bf16: reading it would make Inductor store
it, rounded, and its other users would read the rounded value, so the losses would change (a bf16
model compiled on the CPU showed it, docs/architecture.md).

So a module is checked on those of its outputs that are written anyway. Its inputs are the
nearest such values upstream of what it took, and the modules that ran in between, unchecked,
are named with it (unchecked_before): any of them may have made the value it is blamed for.

The op is marked side-effecting, so the compiler keeps it though nothing uses its result; it only
reads. At run time the graph's wrapper (compiled_graphs.py) says where the graph's module numbers
start for the place it runs from: one graph Dynamo compiled from a block's forward serves every
block. Only the forward is checked: the backward of compiled code runs as one graph with no
module boundaries left in it.
"""
import collections
import operator

from . import trail
from .module_paths import dynamo_path

# Unwritten values a module's check walks past, upstream of its inputs, before it stops looking.
_WALK_LIMIT = 32
# Last in a module's unchecked_before where the walk stopped: code further upstream ran unchecked too.
FURTHER_UPSTREAM = "..."
# Ops Inductor runs as kernels of their own (a library call or a template) that read every operand
# from memory, by the name of their target (function, method or operator).
_READ_FROM_MEMORY = frozenset(("linear", "matmul", "mm", "bmm", "addmm", "baddbmm", "addbmm", "conv1d", "conv2d", "conv3d"))


def _class_name(cls):
    return cls.__name__ if isinstance(cls, type) else str(cls).rsplit(".", 1)[-1]


def _weight(node):
    """A parameter or buffer of the model: Dynamo lifts them to graph inputs named for them."""
    return node.op == "get_attr" or (node.op == "placeholder" and ("_parameters_" in node.name or "_buffers_" in node.name))


def _target_name(node):
    if node.op == "call_method":
        return node.target
    if node.op == "call_function":
        return "matmul" if node.target is operator.matmul else getattr(node.target, "__name__", "")
    return ""


class _Graph:
    """What of a graph Inductor writes to memory anyway, and what lies between those values."""

    def __init__(self, gm, tensor_type):
        self.nodes = list(gm.graph.nodes)
        self.order = {node: i for i, node in enumerate(self.nodes)}
        self.tensor_type = tensor_type
        self.written = set()
        for node in self.nodes:
            if node.op == "placeholder" and self.is_tensor(node) and not _weight(node):
                self.written.add(node)
            elif node.op == "output":
                self.written.update(n for n in node.all_input_nodes if self.is_tensor(n))
            elif _target_name(node) in _READ_FROM_MEMORY:
                operands = [n for n in node.all_input_nodes if self.is_tensor(n)]
                if all(self._read_as_matrix(n) for n in operands):
                    self.written.update(n for n in operands if not _weight(n))

    def is_tensor(self, node):
        return isinstance(node.meta.get("example_value"), self.tensor_type)

    def _read_as_matrix(self, node):
        """With a matrix dimension of 1, Inductor may turn a product into pointwise code on its
        operands (decomposition.py: mm, bmm, addmm), which are then not read from memory. A
        vector is only a layer's bias."""
        shape = node.meta["example_value"].shape
        if len(shape) < 2:
            return _weight(node)
        # A symbolic size counts as not 1: Inductor decides such sizes size-obliviously.
        return all(not isinstance(d, int) or d > 1 for d in shape[-2:])

    def upstream(self, starts):
        """Walking up from `starts`: (the nearest written values, the unwritten nodes passed, nearest
        first, whether the walk stopped at its limit before reaching written values everywhere).

        Bounded: a residual stream is never an operand of a matrix product, so an unbounded walk
        from a deep block's input would run back through every earlier block, and its check would
        read, and keep alive, the written values of all of them."""
        values, passed, seen = set(), [], set()
        queue = collections.deque(starts)
        while queue:
            node = queue.popleft()
            if node in seen:
                continue
            seen.add(node)
            if node in self.written:
                values.add(node)
            elif node.op not in ("placeholder", "get_attr"):  # a weight, or a size: nothing upstream
                if len(passed) == _WALK_LIMIT:
                    return values, passed, True
                passed.append(node)
                queue.extend(node.all_input_nodes)
        return values, passed, False


class Plan:
    """A graph's modules, numbered in graph order of their checks (after one node, outer modules
    first; each check's record carries the order it ran in): (path within the graph, class, paths
    of the modules that ran unchecked before it, nearest first, then FURTHER_UPSTREAM where the walk
    stopped at its limit)."""

    def __init__(self, gm):
        self.gm = gm
        self.modules = []
        self.nodes = []  # the checks put into the graph
        self.bases = {}  # the eager path the graph runs from -> the number of its first module

    def base(self, prefix):
        """The number of the graph's first module when it runs from the module at `prefix`."""
        first = self.bases.get(prefix)
        if first is None:
            def full(inside):
                if inside == FURTHER_UPSTREAM:
                    return inside
                return f"{prefix}.{inside}" if prefix and inside else (prefix or inside)

            named = [(full(inside), cls, [full(u) for u in unchecked]) for inside, cls, unchecked in self.modules]
            first = self.bases[prefix] = trail.numbers.take(named)
        return first

    def remove(self):
        """Takes the checks out of the graph again: it is what Dynamo made."""
        for node in reversed(self.nodes):
            self.gm.graph.erase_node(node)
        self.nodes = []
        self.gm.recompile()


def instrument(gm, torch):
    """Puts the trail's check into `gm` after each module's outputs that Inductor writes anyway.
    Returns the Plan, or None when the graph holds no such output."""
    check = torch.ops.nanprov.trail_compiled.default
    torch.fx.node.has_side_effect(check)
    g = _Graph(gm, torch.Tensor)
    members, described, innermost = {}, {}, {}
    for node in g.nodes:
        if node.op in ("placeholder", "get_attr", "output"):
            continue
        for key, (path, cls) in (node.meta.get("nn_module_stack") or {}).items():
            members.setdefault(key, set()).add(node)
            described.setdefault(key, (dynamo_path(path), _class_name(cls)))
            innermost[node] = key  # the stack runs outermost first

    checks = []
    for key, inside in members.items():
        # Its outputs: written values it made that are used outside it, and the written values
        # inside it of which it is the innermost module (an operand of a product inside it): else
        # a value made and used within a module would only ever be read as a later check's input.
        outputs = sorted((n for n in inside if n in g.written and (innermost[n] == key or any(u not in inside for u in n.users))),
                         key=g.order.get)
        if not outputs:
            continue
        taken = {a for n in inside for a in n.all_input_nodes if a not in inside}
        values, passed, stopped = g.upstream(taken)
        path = described[key][0]
        unchecked = []  # nearest first: the likeliest to have made the value
        for n in sorted(passed, key=g.order.get, reverse=True):
            m = innermost.get(n)
            if m is not None and described[m][0] != path and described[m][0] not in unchecked:
                unchecked.append(described[m][0])
        if stopped:
            unchecked.append(FURTHER_UPSTREAM)
        inputs = sorted(values, key=g.order.get)
        after = max(outputs + inputs, key=g.order.get)
        checks.append((g.order[after], -len(inside), key, inputs, outputs, after, unchecked))
    if not checks:
        return None
    plan = Plan(gm)
    # In graph order; after one node, outer modules first: each insert lands right after the node,
    # so the innermost module's check runs first, as its forward hook would in eager mode.
    for _, _, key, inputs, outputs, after, unchecked in sorted(checks, key=lambda c: c[:2]):
        with gm.graph.inserting_after(after):
            plan.nodes.append(gm.graph.call_function(check, (len(plan.modules), inputs, outputs)))
        plan.modules.append((*described[key], unchecked))
    gm.recompile()
    return plan
