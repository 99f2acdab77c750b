"""``blu.distributed`` (JAX's ``jax.distributed``): join a multi-process job.

    import blu
    blu.distributed.initialize()      # under mpirun, srun, torchrun or blu.parallel.launch
    mesh = blu.make_mesh((blu.process_count(),), ("data",))

The same functions as ``blu.parallel.initialize`` / ``shutdown`` / ``is_initialized``, with
JAX's argument names. The rank, the number of processes and the local GPU are read from the
launcher's variables when not given: ``RANK`` / ``WORLD_SIZE`` / ``LOCAL_RANK`` (torchrun and
``python -m blu.parallel.launch``), SLURM's ``SLURM_PROCID`` / ``SLURM_NTASKS`` /
``SLURM_LOCALID`` (srun) and Open MPI's ``OMPI_COMM_WORLD_*`` (mpirun).
"""

from __future__ import annotations

from blu.parallel.runtime import initialize as _initialize
from blu.parallel.runtime import is_initialized, shutdown

__all__ = ["initialize", "is_initialized", "shutdown"]


def initialize(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    local_device_ids: int | list[int] | None = None,
    *,
    backend: str | None = None,
    initialization_timeout: float = 300.0,
) -> None:
    """Join the job: one process per device, collectives between processes.

    Args:
        coordinator_address: ``host:port`` of process 0's store (default ``MASTER_ADDR`` /
            ``MASTER_PORT``).
        num_processes, process_id: the job's size and this process's rank (default: from the
            launcher's environment; a lone process is a world of one).
        local_device_ids: this process's GPU on its host (one id; default ``LOCAL_RANK``).
        backend: ``"nccl"``, ``"mpi"`` or ``"cpu"`` (see ``blu.parallel.initialize``).
        initialization_timeout: seconds to wait for the other processes.

    Raises:
        BluValueError: inconsistent ranks, an unknown backend, more than one local device id,
            or a second call with other arguments.
    """
    from blu.core.errors import BluValueError, with_user_line

    local = local_device_ids
    if isinstance(local, (list, tuple)):
        if len(local) != 1:
            raise BluValueError(
                with_user_line(
                    f"distributed.initialize: local_device_ids={local!r}: blu runs one device per "
                    "process, so give one id"
                )
            )
        local = local[0]
    _initialize(
        process_id=process_id,
        num_processes=num_processes,
        local_rank=local,
        coordinator_address=coordinator_address,
        backend=backend,
        timeout=initialization_timeout,
    )
