"""One process per device: ``initialize()``, the job's store, and communicators per mesh axis.

The rank and world size come from (first found): the arguments; ``RANK``/``WORLD_SIZE``
(``python -m blu.parallel.launch``, torchrun); ``SLURM_PROCID``/``SLURM_NTASKS``;
``OMPI_COMM_WORLD_RANK``/``OMPI_COMM_WORLD_SIZE`` (Open MPI's mpirun); ``PMI_RANK``/``PMI_SIZE``
(MPICH's mpiexec). The store is at ``MASTER_ADDR:MASTER_PORT`` (default 127.0.0.1:29500); the
launcher serves it, otherwise rank 0 does. Rank 0 makes the NCCL unique id and publishes it there
(under mpirun with mpi4py, it broadcasts it through MPI instead, and no store is needed).

Backends (``backend=``, ``blu.config.parallel_backend``, ``BLU_PARALLEL_BACKEND``; by default
``nccl`` with a GPU, else ``mpi`` under mpirun when mpi4py is there, else ``cpu``):
``nccl`` (GPUs), ``mpi`` (CPU processes through MPI, ``blu.parallel.mpi``) and ``cpu`` (CPU
processes through the TCP store: slow, needs nothing installed).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

from blu.core.errors import BluValueError
from blu.parallel.comm import Communicator, SelfCommunicator, StoreCommunicator
from blu.parallel.device import Device
from blu.parallel.store import LocalStore, StoreServer, TCPStore


class _Runtime:
    def __init__(self, rank, world, local_rank, backend, store, server, world_comm):
        self.rank = rank
        self.world = world
        self.local_rank = local_rank
        self.backend = backend
        self.store = store
        self.server = server
        self.world_comm = world_comm
        self.platform = "gpu" if backend == "nccl" else "cpu"
        self.groups: dict[Any, Communicator] = {}


_rt: _Runtime | None = None


def _env_int(*names: str) -> int | None:
    for n in names:
        v = os.environ.get(n)
        if v not in (None, ""):
            return int(v)
    return None


def _rank_world_local() -> tuple[int, int, int]:
    for r, w, l in (
        ("RANK", "WORLD_SIZE", "LOCAL_RANK"),
        ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),
        ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
        ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
    ):
        rank, world = _env_int(r), _env_int(w)
        if rank is not None and world is not None:
            local = _env_int(l)
            return rank, world, rank if local is None else local
    return 0, 1, 0


def initialize(
    process_id: int | None = None,
    num_processes: int | None = None,
    local_rank: int | None = None,
    coordinator_address: str | None = None,
    backend: str | None = None,
    timeout: float = 300.0,
) -> None:
    """Join the job: one process per device, collectives between processes.

    Args:
        process_id, num_processes, local_rank: this process's rank, the number of processes
            and its GPU on the host (default: from the launcher's, SLURM's or Open MPI's
            environment variables; a lone process is a world of one).
        coordinator_address: ``host:port`` of the store (default ``MASTER_ADDR:MASTER_PORT``).
        backend: ``"nccl"`` (GPUs; default when nccl4py and a GPU are there), ``"mpi"`` (CPU
            processes through mpi4py; default under mpirun without a GPU) or ``"cpu"``
            (collectives through the store); also the ``parallel_backend`` flag
            (``BLU_PARALLEL_BACKEND``).
        timeout: seconds to wait for the other processes.

    Raises:
        BluValueError: inconsistent rank/world size, an unknown backend, or a second call with
            different arguments.
    """
    global _rt
    backend = _choose_backend(backend)
    env_rank, env_world, env_local = _rank_world_local()
    if backend == "mpi":
        from blu.parallel import mpi

        world_mpi = mpi.MpiCommunicator.world()
        env_rank, env_world = world_mpi.rank, world_mpi.size
    rank = env_rank if process_id is None else int(process_id)
    world = env_world if num_processes is None else int(num_processes)
    local = (env_local if process_id is None else rank) if local_rank is None else int(local_rank)
    if _rt is not None:
        if (_rt.rank, _rt.world) != (rank, world):
            raise BluValueError(
                f"blu.parallel.initialize: already initialized as rank {_rt.rank} of "
                f"{_rt.world}, now asked for rank {rank} of {world}"
            )
        return
    if not 0 <= rank < world:
        raise BluValueError(f"blu.parallel.initialize: rank {rank} is not in [0, {world})")
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # never NVLink multicast
    _mark_for_launcher(rank)
    if backend == "mpi":
        if (rank, world) != (env_rank, env_world):
            raise BluValueError(
                f"blu.parallel.initialize: MPI says rank {env_rank} of {env_world}, the "
                f"arguments say rank {rank} of {world}"
            )
        mpi.install_abort_hook()  # a failing rank ends the job instead of hanging the others
        mpi.install_exit_hook(world_mpi)  # so does one that exits while others wait for it
        store, server = _connect_store_if_asked(rank, world, coordinator_address, timeout)
        _rt = _Runtime(rank, world, local, backend, store, server, world_mpi)
        return
    if backend == "nccl" and _mpi_bootstrap(coordinator_address):
        from blu.parallel import mpi, nccl

        boot = mpi.MpiCommunicator.world()
        uid = boot.bcast_bytes(nccl.new_unique_id() if boot.rank == 0 else None)
        world_comm: Communicator = nccl.NcclCommunicator.init(world, rank, uid, local)
        _rt = _Runtime(rank, world, local, backend, None, None, world_comm)
        return
    store, server = _connect_store(rank, world, coordinator_address, timeout)
    if backend == "nccl":
        from blu.parallel import nccl

        if rank == 0:
            store.set("blu/nccl_unique_id", nccl.new_unique_id())
        uid = store.get("blu/nccl_unique_id")
        world_comm = nccl.NcclCommunicator.init(world, rank, uid, local)
    elif world == 1:
        world_comm = SelfCommunicator()
    else:
        world_comm = StoreCommunicator(store, range(world), rank, "blu/world")
    _rt = _Runtime(rank, world, local, backend, store, server, world_comm)


BACKENDS = ("nccl", "mpi", "cpu")


def _mark_for_launcher(rank: int) -> None:
    """Under ``launch --backend mpi``: mark this rank started now and done at normal exit, so
    the launcher can tell a job whose rank vanished (mpiexec may report success) from one
    that finished."""
    folder = os.environ.get("BLU_LAUNCH_DONE_DIR")
    if not folder or not os.path.isdir(folder):
        return
    import atexit

    open(os.path.join(folder, f"{rank}.start"), "w").close()

    def done() -> None:
        # not after an uncaught exception: the abort hook's MPI_Abort may still let this rank
        # run its exit handlers before mpiexec kills it (seen under load), and a rank that
        # failed must not look finished (Python sets sys.last_value before the excepthook runs)
        if getattr(sys, "last_value", None) is None:
            open(os.path.join(folder, f"{rank}.done"), "w").close()

    atexit.register(done)


def _choose_backend(backend: str | None) -> str:
    """The argument, else the ``parallel_backend`` flag / ``BLU_PARALLEL_BACKEND``, else
    ``nccl`` with a GPU, ``mpi`` under mpirun (with mpi4py), ``cpu`` otherwise."""
    if not backend:
        from blu.core.config import config

        backend = config.parallel_backend or None
    if backend is None:
        from blu.parallel import mpi, nccl

        if nccl.available():
            backend = "nccl"
        elif mpi.launched_by_mpirun() and mpi.available():
            backend = "mpi"
        else:
            backend = "cpu"
    if backend not in BACKENDS:
        raise BluValueError(
            f"blu.parallel.initialize: unknown backend {backend!r} ({', '.join(BACKENDS)})"
        )
    return backend


def _mpi_bootstrap(address: str | None) -> bool:
    """Under mpirun with mpi4py and no store address: NCCL's unique id goes through MPI."""
    from blu.parallel import mpi

    return (
        address is None
        and "MASTER_PORT" not in os.environ
        and mpi.launched_by_mpirun()
        and mpi.available()
    )


def _connect_store_if_asked(rank: int, world: int, address: str | None, timeout: float):
    # the MPI backend needs no store; one is served only when an address is given
    if address is None and "MASTER_PORT" not in os.environ:
        return None, None
    return _connect_store(rank, world, address, timeout)


def _connect_store(rank: int, world: int, address: str | None, timeout: float):
    if address is None and "MASTER_PORT" not in os.environ and world == 1:
        return LocalStore(), None
    if address is not None:
        host, _, port = address.rpartition(":")
    else:
        host = os.environ.get("MASTER_ADDR", "127.0.0.1")
        port = os.environ.get("MASTER_PORT", "29500")
    server = None
    if rank == 0 and os.environ.get("BLU_STORE_SERVED") != "1":
        server = StoreServer(host, int(port))
    return TCPStore(host, int(port), timeout), server


def shutdown() -> None:
    """Leave the job (tests; a process that ends needs not call it)."""
    global _rt
    if _rt is not None:
        _rt.world_comm.barrier() if _rt.world > 1 else None
        if _rt.store is not None:
            _rt.store.close()
        if _rt.server is not None:
            _rt.server.close()
    _rt = None


def is_initialized() -> bool:
    """Whether ``initialize()`` has set up this process's multi-process runtime."""
    return _rt is not None


def process_index() -> int:
    """This process's rank (0 without ``initialize``)."""
    return 0 if _rt is None else _rt.rank


def backend() -> str | None:
    """The collective backend of this job (``"nccl"``, ``"mpi"``, ``"cpu"``), None before
    ``initialize()``."""
    return None if _rt is None else _rt.backend


def process_count() -> int:
    """The number of processes of the job (1 without ``initialize``)."""
    return 1 if _rt is None else _rt.world


def world_devices() -> list[Device]:
    assert _rt is not None
    return [
        Device(r, _rt.platform, r, _rt.local_rank if r == _rt.rank else -1)
        for r in range(_rt.world)
    ]


def this_device() -> Device:
    assert _rt is not None
    return world_devices()[_rt.rank]


def store():
    """The job's key-value store (``set``/``get``/``add``/``delete``)."""
    if _rt is None:
        raise BluValueError("blu.parallel.store(): call blu.parallel.initialize() first")
    if _rt.store is None:
        raise BluValueError(
            f"blu.parallel.store(): the {_rt.backend} backend under mpirun runs without a store; "
            "set MASTER_ADDR/MASTER_PORT (or coordinator_address) to have one"
        )
    return _rt.store


def world_communicator() -> Communicator:
    if _rt is None:
        raise BluValueError("call blu.parallel.initialize() first")
    return _rt.world_comm


def comm_for(mesh: Any, names: Sequence[Any]) -> Communicator:
    """The communicator of this process's group along mesh axes ``names``: the processes that
    differ from this one only along them, ordered by their index over ``names``."""
    assert _rt is not None
    names = tuple(names)
    key = (mesh, names)
    comm = _rt.groups.get(key)
    if comm is not None:
        return comm
    me = mesh.coords(this_device())
    others = [n for n in mesh.axis_names if n not in names]

    def lin(coords: dict, axes: Sequence[Any]) -> int:
        i = 0
        for n in axes:
            i = i * mesh.shape[n] + coords[n]
        return i

    members = sorted(
        (d for d in mesh.devices.flat if all(mesh.coords(d)[n] == me[n] for n in others)),
        key=lambda d: lin(mesh.coords(d), names),
    )
    ranks = [d.process_index for d in members]
    if ranks == list(range(_rt.world)):
        comm = _rt.world_comm
    elif len(ranks) == 1:
        comm = SelfCommunicator()
    elif _rt.backend in ("nccl", "mpi"):
        # a collective over the world: every process reaches it at the same point (SPMD)
        comm = _rt.world_comm.split(lin(me, others), lin(me, names))  # type: ignore[attr-defined]
    else:
        comm = StoreCommunicator(_rt.store, ranks, _rt.rank, f"blu/g{ranks}")
    _rt.groups[key] = comm
    return comm
