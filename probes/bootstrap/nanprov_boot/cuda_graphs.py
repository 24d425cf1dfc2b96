"""CUDA graphs: attention captured into a graph is checked at every replay.

While a graph is being captured, the probes capture each attention call's check into it. A
replay runs the graph without passing through the dispatcher, so the probes must be told which
graph each capture is and when a graph is replayed. `torch.cuda.CUDAGraph` is where every user of
graphs in torch goes (`torch.cuda.graph`, `make_graphed_callables`, torch.compile's cudagraph
trees, TransformerEngine's and Megatron's graph options): its `capture_begin`, `replay` and
`reset` each tell the probes, by one call, under a key given to the graph at its first capture.

torch.compile's cudagraph trees also run a graph's code eagerly once, allocating into the graph's
private memory pool, and stop the training if any allocation there is alive that they did not
hand out. Around that warm-up the probes are told not to hold the tensors they check.
"""

import contextlib
import functools
import itertools


def watch_cudagraph_trees(trees, lib):
    """Wraps cudagraph trees' pool context (torch._inductor.cudagraph_trees, imported lazily)."""
    original = getattr(trees, "_use_cuda_memory_pool_manager", None)
    if original is None or getattr(original, "__nanprov_pool__", False):
        return

    @contextlib.contextmanager
    @functools.wraps(original)
    def pool_manager(*args, **kwargs):
        with original(*args, **kwargs):
            lib.nanprov_graph_pool(1)
            try:
                yield
            finally:
                lib.nanprov_graph_pool(0)

    pool_manager.__nanprov_pool__ = True
    trees._use_cuda_memory_pool_manager = pool_manager


def install(torch, lib):
    graph_class = getattr(getattr(torch.cuda, "graphs", None), "CUDAGraph", None)
    if graph_class is None or getattr(graph_class, "__nanprov_graphs__", False):
        return
    keys = itertools.count(1)

    def key_of(graph):
        key = graph.__dict__.get("_nanprov_key")
        if key is None:
            key = graph.__dict__["_nanprov_key"] = next(keys)
        return key

    def tell(what, graph):
        try:
            what(key_of(graph))
        except Exception:  # never in the way of the graph
            pass

    def wrap(name, before=None, after=None):
        original = getattr(graph_class, name, None)
        if original is None:
            return

        @functools.wraps(original)
        def method(self, *args, **kwargs):
            if before:
                tell(before, self)
            result = original(self, *args, **kwargs)
            if after:
                tell(after, self)
            return result

        setattr(graph_class, name, method)

    # After capture_begin, the current stream is the one capturing; a replay is named before it
    # is launched, in the step it belongs to.
    wrap("capture_begin", after=lib.nanprov_graph_capture_began)
    wrap("replay", before=lib.nanprov_graph_replayed)
    wrap("reset", before=lib.nanprov_graph_reset)
    graph_class.__nanprov_graphs__ = True
