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
block.

The backward runs as one graph AOTAutograd made, with no module boundaries and no wrapper of
ours around it, compiled when it first runs. Its nodes still carry the module of the forward node
they differentiate (fwd_nn_module_stack, by autograd's sequence numbers; a custom Function's
backward and a recomputed forward op keep the stack they were traced in), so an Inductor pass
over the backward graph (_BackwardChecks) puts torch.ops.nanprov.trail_compiled_backward after
each module's written gradients, by the same rules. Its module numbers are fixed in the graph: only
where the forward graph it belongs to ran from one place; where that forward serves several, its
backward is not checked, and the store says so (trail_compiled_backward: unchecked). Backward code
in no module (the residual stream's gradient sums) is named among a check's unchecked as
NO_MODULE. docs/architecture.md says what was measured on torch 2.13 to get here.
"""

import collections
import itertools
import operator
import os

from . import trail
from .module_paths import dynamo_path

# Unwritten values a module's check walks past, upstream of its inputs, before it stops looking.
_WALK_LIMIT = 32
# Last in a module's unchecked_before where the walk stopped: code further upstream ran unchecked too.
FURTHER_UPSTREAM = "..."
# In a backward's unchecked_before: code that ran unchecked and belongs to no module nanprov knows.
NO_MODULE = "backward code in no module"
# Forward plans a backward graph is matched against: the newest, a bounded number.
_MAX_PLANS = 256
# Ops Inductor runs as kernels of their own (a library call or a template) that read every operand
# from memory, by the name of their target (function, method or operator).
_READ_FROM_MEMORY = frozenset(
    ("linear", "matmul", "mm", "bmm", "addmm", "baddbmm", "addbmm", "conv1d", "conv2d", "conv3d")
)


def _class_name(cls):
    return cls.__name__ if isinstance(cls, type) else str(cls).rsplit(".", 1)[-1]


def _weight(node):
    """A parameter or buffer of the model: Dynamo lifts them to graph inputs named for them."""
    return node.op == "get_attr" or (
        node.op == "placeholder" and ("_parameters_" in node.name or "_buffers_" in node.name)
    )


def _target_name(node):
    if node.op == "call_method":
        return node.target
    if node.op == "call_function":
        if node.target is operator.matmul:
            return "matmul"
        # An ATen overload after AOTAutograd (aten.mm.default): the op's own name.
        return getattr(node.target, "_opname", None) or getattr(node.target, "__name__", "")
    return ""


def _value(node):
    """The value a node makes: Dynamo's graphs keep it as example_value, AOTAutograd's as val."""
    return node.meta.get("example_value", node.meta.get("val"))


class _Graph:
    """What of a graph Inductor writes to memory anyway, and what lies between those values."""

    def __init__(self, graph, tensor_type):
        self.nodes = list(graph.nodes)
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
        return isinstance(_value(node), self.tensor_type)

    def _read_as_matrix(self, node):
        """With a matrix dimension of 1, Inductor may turn a product into pointwise code on its
        operands (decomposition.py: mm, bmm, addmm), which are then not read from memory. A
        vector is only a layer's bias."""
        shape = _value(node).shape
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
    first; each check's record carries the order it ran in), then the modules it holds with no
    check of their own in the forward (their backward may have one): (path within the graph,
    class, paths of the modules that ran unchecked before it, nearest first, then FURTHER_UPSTREAM
    where the walk stopped at its limit)."""

    def __init__(self, gm, ops):
        self.gm = gm
        self.ops = ops
        self.modules = []
        self.slots = {}  # path within the graph -> its number's offset from the base
        self.nodes = []  # the checks put into the graph
        self.bases = {}  # the eager path the graph runs from -> the number of its first module
        # The module numbers (first, count) backward graphs were given for this plan's one place.
        self.baked = []

    def add(self, path, cls, unchecked):
        self.slots.setdefault(path, len(self.modules))
        self.modules.append((path, cls, unchecked))

    def base(self, prefix):
        """The number of the graph's first module when it runs from the module at `prefix`."""
        first = self.bases.get(prefix)
        if first is None:

            def full(inside):
                if inside == FURTHER_UPSTREAM:
                    return inside
                return f"{prefix}.{inside}" if prefix and inside else (prefix or inside)

            if self.baked:  # its backward's numbers name the first place only: no longer true
                for taken, count in self.baked:
                    self.ops.trail_backward_off(taken, count)
                self.ops.trail_backward_state(False)
            named = [(full(inside), cls, [full(u) for u in unchecked]) for inside, cls, unchecked in self.modules]
            first = self.bases[prefix] = trail.numbers.take(named)
        return first

    def remove(self):
        """Takes the checks out of the graph again: it is what Dynamo made."""
        for node in reversed(self.nodes):
            self.gm.graph.erase_node(node)
        self.nodes = []
        self.gm.recompile()
        if self in _plans:
            _plans.remove(self)


_plans = []  # the newest forward plans, for their backward graphs to find


def _saved_scalar(g, node):
    return (
        node.op == "placeholder"
        and not node.name.startswith("tangents")
        and g.is_tensor(node)
        and _value(node).dim() == 0
    )


def _module_checks(g, stack_of, no_module=None, backward=False, gradients=None):
    """Each module's check in graph `g`: (graph order of the node it goes after, -its size, its
    (path, class), the written values it takes, the written values it makes, that node, the modules
    that ran unchecked before it), and every module's (path, class) by its stack key. `stack_of`
    gives a node's module stack, outermost first; a passed node with none is named `no_module`
    among the unchecked, when given. In a backward graph a view passed makes nothing: it names no
    module among the unchecked (the backward of a Linear reshapes a saved forward value). Given
    `gradients` (the nodes a backward graph's incoming gradients reach), a module's outputs are
    only among them: a forward value recomputed in the backward, kept in its module's stack, is
    not a gradient the module sent."""
    members, described, innermost = {}, {}, {}
    for node in g.nodes:
        if node.op in ("placeholder", "get_attr", "output"):
            continue
        for key, (path, cls) in (stack_of(node) or {}).items():
            members.setdefault(key, set()).add(node)
            described.setdefault(key, (dynamo_path(path), _class_name(cls)))
            innermost[node] = key  # the stack runs outermost first

    checks = []
    for key, inside in members.items():
        # Its outputs: written values it made that are used outside it, and the written values
        # inside it of which it is the innermost module (an operand of a product inside it): else
        # a value made and used within a module would only ever be read as a later check's input.
        outputs = sorted(
            (
                n
                for n in inside
                if n in g.written
                and (innermost[n] == key or any(u not in inside for u in n.users))
                and (gradients is None or n in gradients)
            ),
            key=g.order.get,
        )
        if not outputs:
            continue
        taken = {a for n in inside for a in n.all_input_nodes if a not in inside}
        values, passed, stopped = g.upstream(taken)
        path = described[key][0]
        unchecked = []  # nearest first: the likeliest to have made the value
        for n in sorted(passed, key=g.order.get, reverse=True):
            if backward and _target_name(n) in _VIEWS:
                continue
            m = innermost.get(n)
            name = described[m][0] if m is not None else (no_module if n.op == "call_function" else None)
            if name is not None and name != path and name not in unchecked:
                unchecked.append(name)
        if stopped:
            unchecked.append(FURTHER_UPSTREAM)
        if backward:
            # A scalar saved for the backward (a custom Function's ctx.scale, become a float32
            # tensor) is the module's own constant, as a weight is in the forward: not received.
            values = {v for v in values if not _saved_scalar(g, v)}
        inputs = sorted(values, key=g.order.get)
        after = max(outputs + inputs, key=g.order.get)
        checks.append((g.order[after], -len(inside), described[key], inputs, outputs, after, unchecked))
    # In graph order; after one node, outer modules first: each insert lands right after the node,
    # so the innermost module's check runs first, as its forward hook would in eager mode.
    checks.sort(key=lambda c: c[:2])
    return checks, described


def instrument(gm, torch):
    """Puts the trail's check into `gm` after each module's outputs that Inductor writes anyway.
    Returns the Plan, or None when the graph holds no module."""
    ops = torch.ops.nanprov
    check = ops.trail_compiled.default
    torch.fx.node.has_side_effect(check)
    g = _Graph(gm.graph, torch.Tensor)
    checks, described = _module_checks(g, lambda node: node.meta.get("nn_module_stack"))
    if not described:
        return None
    plan = Plan(gm, ops)
    for _, _, (path, cls), inputs, outputs, after, unchecked in checks:
        with gm.graph.inserting_after(after):
            plan.nodes.append(gm.graph.call_function(check, (len(plan.modules), inputs, outputs)))
        plan.add(path, cls, unchecked)
    for path, cls in described.values():
        if path not in plan.slots:
            plan.add(path, cls, [])
    if plan.nodes:
        gm.recompile()
    _plans.append(plan)
    del _plans[:-_MAX_PLANS]
    return plan


# ATen ops that only reshape a value: Inductor makes no new buffer for them.
_VIEWS = frozenset(
    ("view", "reshape", "_unsafe_view", "permute", "t", "transpose", "expand", "squeeze", "unsqueeze", "alias")
)


class _BackwardModules:
    """The module whose backward made each node's value in AOTAutograd's backward graph: the
    forward module it differentiates (fwd_nn_module_stack); a custom autograd.Function's backward,
    traced inside its module, keeps that module's own stack, as does a forward op recomputed there
    (which _from_gradients keeps out of a module's outputs). A view of a value is that value, made
    where it was: the backward of a Linear reshapes the gradient it is handed before its product,
    and that written operand is the gradient's maker's output, not the Linear's. Worked out once,
    in graph order (every node after what it takes)."""

    def __init__(self, graph):
        self.stacks = {}
        for node in graph.nodes:
            made = [a for a in node.all_input_nodes if a.op == "call_function"]
            if _target_name(node) in _VIEWS and len(made) == 1:
                self.stacks[node] = self.stacks.get(made[0])
                continue
            # A custom Function's backward, and a forward op recomputed there, keep the stack they
            # were traced in. torch 2.13 also marks them autograd_backward; 2.11 does not, so that
            # mark is not asked for: without their own stack they would take their one maker's.
            stack = node.meta.get("fwd_nn_module_stack") or node.meta.get("nn_module_stack")
            if stack is None:
                # A node Inductor's own passes made (a product by a constant folded into a tensor)
                # has no module: where all it takes was made by one module, it is that module's.
                # A sum of gradients from two modules stays in none.
                makers = {next(reversed(m)): m for m in map(self.stacks.get, made) if m}
                stack = next(iter(makers.values())) if len(makers) == 1 else None
            self.stacks[node] = stack

    def __call__(self, node):
        return self.stacks.get(node)


def _from_gradients(graph):
    """The nodes of a backward graph that the incoming gradients (its tangents) reach."""
    reached = set()
    for node in graph.nodes:
        if (node.op == "placeholder" and node.name.startswith("tangents")) or any(
            a in reached for a in node.all_input_nodes
        ):
            reached.add(node)
    return reached


def _is_backward(graph):
    return any(n.op == "placeholder" and n.name.startswith("tangents") for n in graph.nodes)


def instrument_backward(graph, torch):
    """Puts the trail's backward check into AOTAutograd's backward `graph` (post-grad ATen ops)
    after each module's written gradients, numbered from the forward plan the graph belongs to.
    Returns how many checks went in, or why none could: a text."""
    g = _Graph(graph, torch.Tensor)
    checks, described = _module_checks(
        g, _BackwardModules(graph), NO_MODULE, backward=True, gradients=_from_gradients(graph)
    )
    if not checks:
        return 0
    paths = {path for path, _ in described.values()}
    plans = [p for p in _plans if paths <= p.slots.keys()]
    places = {prefix for p in plans for prefix in p.bases}
    if len(places) != 1:
        return (
            "its forward graph is not known"
            if not plans
            else "its forward has not run yet"
            if not places
            else "its forward graph serves several places"
        )
    plan = next(p for p in reversed(plans) if p.bases)
    first = plan.bases[next(iter(places))]
    ops = torch.ops.nanprov
    check = ops.trail_compiled_backward.default
    torch.fx.node.has_side_effect(check)
    graph_number = next(_graph_numbers)
    for position, (_, _, (path, _cls), inputs, outputs, after, unchecked) in enumerate(checks):
        number = first + plan.slots[path]
        prefix = next(iter(places))
        ops.trail_backward_unchecked(
            number,
            "\n".join(u if u in (FURTHER_UPSTREAM, NO_MODULE) or not prefix else f"{prefix}.{u}" for u in unchecked),
        )
        with graph.inserting_after(after):
            graph.call_function(check, (number, graph_number, position, len(checks), inputs, outputs)).meta["val"] = (
                None
            )
    for p in plans:  # a new place for any of them may be the one this backward runs for
        p.baked.append((first, len(plan.modules)))
    return len(checks)


class _BackwardChecks:
    """Inductor's post-grad pass: puts the trail's checks into every backward graph, after any pass
    set before it. Inductor deep-copies its config, this pass included: it holds no module. Its
    uuid is new each time: the numbers it puts into a graph are this process's, so no compiled
    graph with them may come from Inductor's cache."""

    def __init__(self, chained):
        self.chained = chained

    def __call__(self, graph):
        if self.chained is not None:
            self.chained(graph)
        if not _is_backward(graph):
            return
        import torch  # the training's own, imported long before any graph is compiled

        try:
            done = instrument_backward(graph, torch)
        except Exception as exc:  # the graph as AOTAutograd made it
            done = f"{type(exc).__name__}: {exc}"
        if isinstance(done, str):
            trail.say_once("backward", f"--trail: a compiled backward's modules are not checked ({done})")
            torch.ops.nanprov.trail_backward_state(False)
        elif done:
            torch.ops.nanprov.trail_backward_state(True)

    def uuid(self):
        return f"nanprov-trail-backward:{os.getpid()}:{next(_uuids)}"


_uuids = itertools.count()
_graph_numbers = itertools.count()  # each backward graph checked, for the order of its checks


def install_backward_checks(config):
    """Sets Inductor's post-grad custom pass to _BackwardChecks, chaining any set before."""
    base = __import__("torch._inductor.custom_graph_pass", fromlist=["CustomGraphPass"]).CustomGraphPass
    cls = type("NanprovTrailBackward", (_BackwardChecks, base), {})
    config.post_grad_custom_post_pass = cls(config.post_grad_custom_post_pass)
