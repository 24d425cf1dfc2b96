"""Which rank this process is: its default process group's, however the group came up.

Launchers disagree on where a rank lives: torchrun puts RANK in the environment, srun only
SLURM_PROCID, torch.multiprocessing.spawn passes it as an argument, a hand-written launcher
however it likes. All of them end in init_process_group (directly, or through init_device_mesh,
Lightning, accelerate), so the probes learn the rank there, from the group itself
(nanprov_process_group). A group made some other way is found at the next optimizer step, before
the probes settle on the environment's guess. A DeviceMesh's coordinates go beside the rank.
"""

import os

_LOCAL_RANK_VARIABLES = ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID")


def _local_rank():
    for name in _LOCAL_RANK_VARIABLES:
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return -1


def install(torch, lib, on_rank, fail):
    """Wraps init_process_group and init_device_mesh; returns the check to run before each step.
    `on_rank(rank)` runs once the rank is known; `fail(exc)` says a failure once."""
    dist = torch.distributed
    if not dist.is_available():
        return lambda: None
    told = []

    def tell():
        if told or not dist.is_initialized():
            return
        try:
            rank, world = dist.get_rank(), dist.get_world_size()
        except Exception as exc:  # a group being torn down: try again at the next step
            fail(exc)
            return
        told.append(rank)
        lib.nanprov_process_group(rank, world, _local_rank())
        on_rank(rank)

    def wrap(original):
        def init_process_group(*args, **kwargs):
            result = original(*args, **kwargs)
            try:
                tell()
            except Exception as exc:
                fail(exc)
            return result

        init_process_group.__wrapped__ = original
        return init_process_group

    c10d = dist.distributed_c10d
    if not hasattr(c10d.init_process_group, "__wrapped__"):
        wrapped = wrap(c10d.init_process_group)
        c10d.init_process_group = wrapped  # what init_device_mesh and the launchers' libraries call
        dist.init_process_group = wrapped
    _watch_meshes(torch, lib, tell, fail)
    try:
        tell()  # already up: the probes loaded after it
    except Exception as exc:
        fail(exc)
    return tell


def _watch_meshes(torch, lib, tell, fail):
    try:
        from torch.distributed import device_mesh
    except Exception:
        return
    original = device_mesh.init_device_mesh
    if hasattr(original, "__wrapped__"):
        return

    def init_device_mesh(*args, **kwargs):
        mesh = original(*args, **kwargs)
        try:
            tell()
            coordinate = mesh.get_coordinate()
            if coordinate is not None:
                names = mesh.mesh_dim_names or tuple(f"dim{i}" for i in range(len(coordinate)))
                lib.nanprov_mesh(",".join(f"{n}={c}" for n, c in zip(names, coordinate)).encode(errors="replace"))
        except Exception as exc:
            fail(exc)
        return mesh

    init_device_mesh.__wrapped__ = original
    device_mesh.init_device_mesh = init_device_mesh
    torch.distributed.init_device_mesh = init_device_mesh
