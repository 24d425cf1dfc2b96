"""Which parameters are replicated, and over which ranks: what the replica digests compare.

After each optimizer step the gradient sentinel digests the parameters an optimizer steps that
are replicated (torch.ops.nanprov.watch_parameters' `replicated`), and the report compares the
digests of the ranks that replicate them. Two things say truly that values are equal across
ranks:
- DistributedDataParallel, for every parameter on every rank of its process group (it broadcasts
  them at construction and all-reduces their gradients). Wrapping its __init__ costs nothing per
  step.
- A DTensor's placements: along a mesh dimension placed `Replicate` (HSDP's replicate dimension,
  or `replicate()`), the ranks that differ only in that coordinate hold the same local shard. Read
  from the parameter when the optimizer's parameters are handed over, not per step.
A DTensor sharded along every dimension it spans (plain FSDP2) is replicated nowhere: never named.
"""

import functools


class Replicas:
    """Parameter -> the global ranks that replicate it (its DDP process group, or its DTensor mesh)."""

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
        """The positions of `params` that one group of ranks replicates, and its ranks ([], [] when none)."""
        groups = [self.ranks_of.get(p) or replicate_group(p) for p in params]
        ranks = next((g for g in groups if g), None)
        if ranks is None:
            return [], []
        return [i for i, g in enumerate(groups) if g == ranks], list(ranks)


def replicate_group(p):
    """The global ranks holding the same local shard of DTensor `p`: along its `Replicate` mesh
    dimensions, those at this rank's coordinate in every other dimension. None for a plain tensor,
    a DTensor with a `Partial` placement (its local values are summands, not copies), or one
    replicated nowhere."""
    mesh, placements = getattr(p, "device_mesh", None), getattr(p, "placements", None)
    if mesh is None or placements is None or getattr(p, "_local_tensor", None) is None:
        return None
    if any(pl.is_partial() for pl in placements):
        return None
    replicated = {d for d, pl in enumerate(placements) if pl.is_replicate()}
    coordinate = mesh.get_coordinate()
    if not replicated or coordinate is None:
        return None
    at = tuple(slice(None) if d in replicated else coordinate[d] for d in range(mesh.ndim))
    ranks = tuple(int(r) for r in mesh.mesh[at].flatten().tolist())
    return ranks if len(ranks) > 1 else None
