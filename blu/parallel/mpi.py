"""MPI collectives for CPU processes through mpi4py (``pip install 'blu[mpi]'``: mpi4py and the
MPICH wheel, which brings ``mpiexec``; a system MPI works too). Imported only on this path.

The MPI backend is the CPU peer of NCCL: one process per rank, each with its device, and the
same sharded programs (``blu.shard`` with psum, all_gather, psum_scatter, ppermute, ...). It is
chosen as JAX chooses its CPU collectives implementation: ``BLU_PARALLEL_BACKEND=mpi`` (or
``blu.config.update("parallel_backend", "mpi")``, or ``initialize(backend="mpi")``), and by
default when the process was started by ``mpirun``/``mpiexec`` on a machine without a GPU.

    mpirun -n 4 python train.py                               # train.py calls initialize()
    python -m blu.parallel.launch --nproc 4 --backend mpi train.py

A rank that fails must not leave the others blocked in a collective: ``install_abort_hook``
makes an uncaught exception call ``MPI_Abort`` (as ``python -m mpi4py`` does), so ``mpiexec``
ends every rank; a rank that exits without finalizing MPI is reported by ``mpiexec`` the same
way.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core.errors import BluError
from blu.parallel.comm import Communicator, contiguous


class MpiError(BluError, RuntimeError):
    """mpi4py or an MPI library is missing, or an MPI call failed."""


# the environment variables MPI launchers set in each rank (MPICH/Intel MPI hydra, Open MPI,
# PMIx): their presence means "started by mpirun"
MPI_RANK_VARS = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")


def launched_by_mpirun() -> bool:
    """Whether this process was started by an MPI launcher (``mpirun``/``mpiexec``)."""
    return any(os.environ.get(v) not in (None, "") for v in MPI_RANK_VARS)


def available() -> bool:
    """Whether mpi4py and an MPI library can be imported."""
    try:
        _mpi()
        return True
    except MpiError:
        return False


def _mpi():
    try:
        from mpi4py import MPI
    except ImportError as e:  # pragma: no cover - depends on the machine
        raise MpiError(
            "the MPI backend needs mpi4py and an MPI library (pip install 'blu[mpi]', i.e. "
            f"mpi4py and mpich): {e}"
        ) from e
    return MPI


def mpiexec() -> str:
    """The path of ``mpiexec``: beside this Python (the ``mpich`` wheel), else on ``PATH``.

    Raises:
        MpiError: none is found.
    """
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if os.access(here, os.X_OK):
        return here
    for name in ("mpiexec", "mpirun"):
        found = shutil.which(name)
        if found:
            return found
    raise MpiError(
        "no mpiexec found beside this Python or on PATH: pip install 'blu[mpi]' (mpich) or "
        "install an MPI"
    )


_hook_installed = False


def install_abort_hook() -> None:
    """Make an uncaught exception in this rank print its traceback and call ``MPI_Abort``, so
    the other ranks are ended by ``mpiexec`` instead of waiting forever in a collective."""
    global _hook_installed
    if _hook_installed:
        return
    MPI = _mpi()
    previous = sys.excepthook

    def hook(kind, value, tb):
        previous(kind, value, tb)
        sys.stderr.write(
            f"blu.parallel: rank {MPI.COMM_WORLD.Get_rank()} failed ({kind.__name__}); "
            "aborting the MPI job\n"
        )
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(1)

    sys.excepthook = hook
    _hook_installed = True


def _reducible(x: np.ndarray):
    """MPI has no bfloat16/float16/bool reductions here: widen them and narrow back."""
    x = contiguous(x)
    if x.dtype in (np.dtype(dtypes.bfloat16), np.dtype(np.float16)):
        return x.astype(np.float32), lambda y: y.astype(x.dtype)
    if x.dtype == np.bool_:
        return x.astype(np.int32), lambda y: y.astype(x.dtype)
    return x, lambda y: y


def _bytes(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).reshape(-1).view(np.uint8)


class MpiCommunicator(Communicator):
    """The collectives of an MPI communicator on host arrays.

    Args:
        comm: an ``mpi4py.MPI.Comm`` (``world()`` gives ``COMM_WORLD``).
    """

    def __init__(self, comm: Any):
        self._comm = comm
        self.size = comm.Get_size()
        self.rank = comm.Get_rank()

    @classmethod
    def world(cls) -> MpiCommunicator:
        return cls(_mpi().COMM_WORLD)

    def split(self, color: int, key: int) -> MpiCommunicator:
        """``MPI_Comm_split``: members with the same color form a group, ordered by key."""
        return MpiCommunicator(self._comm.Split(color, key))

    def _op(self, op: str):
        MPI = _mpi()
        return {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}[op]

    def all_reduce(self, x, op):
        x, back = _reducible(x)
        out = np.empty_like(x)
        if x.size:
            self._comm.Allreduce(x, out, op=self._op(op))
        return back(out)

    def all_gather(self, x):
        x = contiguous(x)
        raw = _bytes(x)
        out = np.empty((self.size, raw.size), np.uint8)
        if raw.size:
            self._comm.Allgather(raw, out)
        return out.view(x.dtype).reshape((self.size,) + x.shape)

    def reduce_scatter(self, x):
        x, back = _reducible(x)
        out = np.empty(x.shape[1:], x.dtype)
        if out.size:
            self._comm.Reduce_scatter_block(x, out, op=self._op("sum"))
        return back(out)

    def all_to_all(self, x):
        x = contiguous(x)
        raw = _bytes(x).reshape(self.size, -1)
        out = np.empty_like(raw)
        if raw.size:
            self._comm.Alltoall(raw, out)
        return out.view(x.dtype).reshape(x.shape)

    def permute(self, x, perm: Sequence[tuple[int, int]]):
        x = contiguous(x)
        src_of = {d: s for s, d in perm}
        dst_of = {s: d for s, d in perm}
        out = np.zeros_like(x)
        if not x.size:
            return out
        reqs = []
        if self.rank in src_of:
            reqs.append(self._comm.Irecv(_bytes(out), source=src_of[self.rank], tag=7))
        if self.rank in dst_of:
            reqs.append(self._comm.Isend(_bytes(x), dest=dst_of[self.rank], tag=7))
        _mpi().Request.Waitall(reqs)
        return out

    def barrier(self) -> None:
        self._comm.Barrier()

    def bcast_bytes(self, value: bytes | None, root: int = 0) -> bytes:
        """``value`` of rank ``root`` on every rank (bootstraps NCCL under mpirun)."""
        return self._comm.bcast(value, root=root)
