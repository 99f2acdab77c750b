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
way. A rank that exits normally while another waits for it in a collective, and ranks that pass
operands of different shapes or dtypes to one collective, end the job with an error on every
rank (``install_exit_hook`` and the collectives' headers: ``blu.parallel.mpi_guard``).
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core.errors import BluError
from blu.parallel import mpi_guard
from blu.parallel.comm import Communicator, contiguous
from blu.parallel.mpi_guard import CollectiveMismatchError, RankExitedError  # noqa: F401


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
        settle = getattr(value, "blu_settle", None)
        if settle is not None:  # every rank raised it: let each say so before the abort
            sys.stderr.flush()
            settle()
        sys.stderr.write(
            f"blu.parallel: rank {MPI.COMM_WORLD.Get_rank()} failed ({kind.__name__}); "
            "aborting the MPI job\n"
        )
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(1)

    sys.excepthook = hook
    _hook_installed = True


def install_exit_hook(world: MpiCommunicator) -> None:
    """Collective over the job (``initialize`` calls it on every rank): a rank that exits
    normally while another waits for it in a collective ends the job with an error on every
    rank instead of hanging it (``blu.parallel.mpi_guard``)."""
    job = mpi_guard.install_exit_hook(world._comm, _mpi())
    if world not in job.comms:
        job.comms.append(world)


# MPI has no bfloat16/float16/bool reductions here: they are reduced in float32
_WIDENED = (np.dtype(dtypes.bfloat16), np.dtype(np.float16), np.dtype(np.bool_))


def _bytes(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).reshape(-1).view(np.uint8)


def _bytes_of(out: np.ndarray) -> np.ndarray:
    """The bytes of ``out`` as a view, for MPI to write into (never a copy)."""
    if not out.flags.c_contiguous:
        raise MpiError(f"an MPI result buffer must be C-contiguous, got strides {out.strides}")
    return out.reshape(-1).view(np.uint8)


class MpiCommunicator(Communicator):
    """The collectives of an MPI communicator on host arrays.

    Every collective first exchanges a header (its name, the operand's dtype and shape) and
    raises ``CollectiveMismatchError`` on every rank when the ranks disagree; its waits raise
    ``RankExitedError`` when a member left the job instead of entering it (``mpi_guard``).

    Args:
        comm: an ``mpi4py.MPI.Comm`` (``world()`` gives ``COMM_WORLD``).
        id: a name of the group that every member gives it (``"world"``, then one per split).
    """

    def __init__(self, comm: Any, id: str = "world"):
        self._comm = comm
        self.size = comm.Get_size()
        self.rank = comm.Get_rank()
        self.id = id
        self.count = 0  # collectives entered (the exit notices carry it)
        self._splits = 0
        MPI = _mpi()
        self.members = list(
            MPI.Group.Translate_ranks(comm.Get_group(), list(range(self.size)),
                                      MPI.COMM_WORLD.Get_group())
        )  # fmt: skip
        job = mpi_guard.job()
        if job is not None:
            job.comms.append(self)

    @classmethod
    def world(cls) -> MpiCommunicator:
        return cls(_mpi().COMM_WORLD)

    def split(self, color: int, key: int) -> MpiCommunicator:
        """``MPI_Comm_split``: members with the same color form a group, ordered by key."""
        self._enter("split", None)  # a barrier first: MPI_Comm_split waits for every member
        self._splits += 1
        return MpiCommunicator(self._comm.Split(color, key), f"{self.id}/{self._splits}:{color}")

    def _wait(self, req: Any, number: int, what: str) -> None:
        job = mpi_guard.job()
        if job is None:
            req.Wait()
        else:
            job.wait(req, self, number, what)

    def _enter(self, what: str, x: np.ndarray | None) -> int:
        """Start collective ``what`` on operand ``x``: check that every member is here with
        the same kind of operand (a barrier when ``x`` is None). Returns its number."""
        number = self.count
        self.count += 1
        if x is None:
            self._wait(self._comm.Ibarrier(), number, what)
            return number
        mine = mpi_guard.header(what, x)
        headers = np.empty((self.size, mine.size), np.uint8)
        self._wait(self._comm.Iallgather(mine, headers), number, what)
        mpi_guard.check_headers(headers, self, what)
        return number

    def settle(self, limit: float = 60.0) -> None:
        """A barrier of the members that all raised the same error (``check_headers``), so
        that each reports it before one aborts the job; ``limit`` seconds at most."""
        req, end = self._comm.Ibarrier(), time.monotonic() + limit
        while not req.Test() and time.monotonic() < end:
            time.sleep(0.001)

    def _op(self, op: str):
        MPI = _mpi()
        return {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}[op]

    # each host method is its ``*_into`` method on a new array; the ``*_into`` methods have MPI
    # read the operand and write the result where they are (a compiled program's planned
    # buffers), copying only for dtypes MPI does not reduce (float32 in ``work``)

    def all_reduce(self, x, op):
        x = np.asarray(x)
        out = np.empty(x.shape, x.dtype)
        self.all_reduce_into(x, out, op)
        return out

    def all_reduce_into(self, x, out, op, work=None):
        what = {"sum": "psum", "max": "pmax", "min": "pmin"}[op]
        number = self._enter(what, np.asarray(x))
        if out.size:
            start = lambda a, b, o: self._comm.Iallreduce(a, b, op=o)  # noqa: E731
            self._reduce(contiguous(x), out, work, number, what, start, op)

    def _reduce(self, x, out, work, number, what, start, op) -> None:
        """Run ``start(send, recv, mpi_op)`` from ``x`` into ``out``; through float32 (in
        ``work`` where it is large enough) for the dtypes MPI does not reduce."""
        if x.dtype not in _WIDENED:
            self._wait(start(x, out, self._op(op)), number, what)
            return
        n = x.size + out.size
        if work is not None and work.nbytes >= 4 * n:
            wide = work[: 4 * n].view(np.float32)
        else:
            wide = np.empty(n, np.float32)
        a, b = wide[: x.size].reshape(x.shape), wide[x.size :].reshape(out.shape)
        np.copyto(a, x, casting="unsafe")
        self._wait(start(a, b, self._op(op)), number, what)
        np.copyto(out, b, casting="unsafe")

    def all_gather(self, x):
        x = np.asarray(x)
        out = np.empty((self.size,) + x.shape, x.dtype)
        self.all_gather_into(x, out)
        return out

    def all_gather_into(self, x, out):
        x = contiguous(x)
        number = self._enter("all_gather", x)
        if x.size:
            self._wait(self._comm.Iallgather(_bytes(x), _bytes_of(out)), number, "all_gather")

    def reduce_scatter(self, x):
        x = np.asarray(x)
        out = np.empty(x.shape[1:], x.dtype)
        self.reduce_scatter_into(x, out)
        return out

    def reduce_scatter_into(self, x, out, work=None):
        number = self._enter("psum_scatter", np.asarray(x))
        if out.size:
            start = lambda a, b, o: self._comm.Ireduce_scatter_block(a, b, op=o)  # noqa: E731
            self._reduce(contiguous(x), out, work, number, "psum_scatter", start, "sum")

    def all_to_all(self, x):
        x = np.asarray(x)
        out = np.empty(x.shape, x.dtype)
        self.all_to_all_into(x, out)
        return out

    def all_to_all_into(self, x, out):
        x = contiguous(x)
        number = self._enter("all_to_all", x)
        if x.size:
            raw, got = _bytes(x).reshape(self.size, -1), _bytes_of(out).reshape(self.size, -1)
            self._wait(self._comm.Ialltoall(raw, got), number, "all_to_all")

    def permute(self, x, perm: Sequence[tuple[int, int]]):
        x = np.asarray(x)
        out = np.empty(x.shape, x.dtype)
        self.permute_into(x, out, perm)
        return out

    def permute_into(self, x, out, perm: Sequence[tuple[int, int]]):
        x = contiguous(x)
        number = self._enter("ppermute", x)
        src_of = {d: s for s, d in perm}
        dst_of = {s: d for s, d in perm}
        if self.rank not in src_of:  # nothing arrives: zeros
            out[...] = 0
        if not x.size:
            return
        reqs = []
        if self.rank in src_of:
            reqs.append(self._comm.Irecv(_bytes_of(out), source=src_of[self.rank], tag=7))
        if self.rank in dst_of:
            reqs.append(self._comm.Isend(_bytes(x), dest=dst_of[self.rank], tag=7))
        for req in reqs:
            self._wait(req, number, "ppermute")

    def barrier(self) -> None:
        self._enter("barrier", None)

    def bcast_bytes(self, value: bytes | None, root: int = 0) -> bytes:
        """``value`` of rank ``root`` on every rank (bootstraps NCCL under mpirun)."""
        return self._comm.bcast(value, root=root)
