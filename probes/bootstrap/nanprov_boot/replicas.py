"""Which parameters DDP replicates, and over which ranks: what the replica digests compare.

After each optimizer step the gradient sentinel digests the parameters an optimizer steps that
are replicated (torch.ops.nanprov.watch_parameters' `replicated`), and the report compares the
digests of the ranks that replicate them. Only DistributedDataParallel says truly that its
parameters are equal on every rank of one process group (it broadcasts them at construction and
all-reduces their gradients), so only its parameters are named here; sharded ones (FSDP2's
DTensors) never are. Wrapping its __init__ costs nothing per step.
"""
import functools


class Replicas:
    """Parameter -> the global ranks of the DDP process group that replicates it."""

    def __init__(self, torch):
        from torch.utils.weak import WeakIdKeyDictionary  # a tensor's == is elementwise: keys by identity

        self.ranks_of = WeakIdKeyDictionary()
        self._torch = torch

    def install(self):
        ddp = self._torch.nn.parallel.DistributedDataParallel
        init = ddp.__init__
        replicas = self

        # The instance is named as no DDP argument is: Lightning passes `module=` by keyword.
        @functools.wraps(init)
        def init_then_note(_nanprov_ddp_self, *args, **kwargs):
            init(_nanprov_ddp_self, *args, **kwargs)
            try:
                replicas.note(_nanprov_ddp_self)
            except Exception:  # the training never notices; its parameters are then not compared
                pass

        ddp.__init__ = init_then_note

    def note(self, ddp_module):
        dist = self._torch.distributed
        ranks = tuple(dist.get_process_group_ranks(ddp_module.process_group))
        ignored = set(getattr(ddp_module, "parameters_to_ignore", ()) or ())
        for name, p in ddp_module.module.named_parameters():
            if name not in ignored and getattr(p, "_local_tensor", None) is None:
                self.ranks_of[p] = ranks

    def of(self, params):
        """The positions of `params` that one DDP group replicates, and its ranks ([], [] when none)."""
        ranks = next((self.ranks_of[p] for p in params if p in self.ranks_of), None)
        if ranks is None:
            return [], []
        return [i for i, p in enumerate(params) if self.ranks_of.get(p) == ranks], list(ranks)
