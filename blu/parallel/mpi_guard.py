"""Guards of the MPI backend's collectives: no garbage, no hang.

- **A header per collective.** Before its data, every collective exchanges a small header (the
  collective's name, the operand's dtype and shape: 128 bytes per rank, one ``MPI_Iallgather``).
  Ranks that disagree all raise the same ``CollectiveMismatchError``, naming each rank's operand,
  instead of reducing bytes of one dtype as another (garbage, exit code 0) or waiting for a
  message size that never comes (a hang).
- **An exit hook.** A rank that leaves normally (the end of its script, ``sys.exit``) while
  another waits for it in a collective would hang the job: ``MPI_Finalize`` waits for the
  others and the others wait for it. ``install_exit_hook`` registers an ``atexit`` hook that
  tells every rank "I have left, after *k* collectives on each communicator" and waits for the
  others to leave too. A rank waiting in a collective polls for those notices: when a member
  of its communicator left before entering this collective (its count for the communicator is
  not past this collective's number: exact, no timeout), it raises
  ``RankExitedError`` (its uncaught-exception hook then aborts the job) once the rank that left
  has acknowledged the same words, which its exit hook prints to its stderr: every rank reports
  the error before either can abort the job, and ``mpiexec`` returns non-zero.

The waits are ``MPI_Test`` loops that yield the CPU (a short back-off up to 2 ms), so a rank
that waits long for a slower one does not take a core from it.
"""

from __future__ import annotations

import atexit
import sys
import time
import zlib
from typing import Any

import numpy as np

from blu.core.errors import BluError

HEADER_BYTES = 128
TAG_EXIT, TAG_BLAME, TAG_ACK = 7001, 7002, 7003


class CollectiveMismatchError(BluError, ValueError):
    """The ranks of an MPI job passed operands of different shapes or dtypes (or called
    different collectives) at the same point."""


class RankExitedError(BluError, RuntimeError):
    """A rank of an MPI job exited while this rank waited for it in a collective."""


def describe(what: str, x: np.ndarray) -> str:
    """``what`` and the operand, as the header carries them: ``psum float32[4,2]``."""
    return f"{what} {x.dtype.name}[{','.join(str(d) for d in x.shape)}]"


def header(what: str, x: np.ndarray) -> np.ndarray:
    """The fixed-size header of a collective on ``x`` (a long shape is shortened with its CRC,
    so that two different shapes never read the same)."""
    text = describe(what, x).encode()
    if len(text) > HEADER_BYTES:
        crc = f"...#{zlib.crc32(text):08x}".encode()
        text = text[: HEADER_BYTES - len(crc)] + crc
    out = np.zeros(HEADER_BYTES, np.uint8)
    out[: len(text)] = np.frombuffer(text, np.uint8)
    return out


def check_headers(headers: np.ndarray, comm: Any, what: str) -> None:
    """Raise ``CollectiveMismatchError`` unless every row of ``headers`` (one per member of
    ``comm``, an ``MpiCommunicator``) is the same. Every member raises it; the error's
    ``blu_settle`` lets the uncaught-exception hook wait (60 s at most) until every member has
    reported it before aborting the job."""
    members = comm.members
    if (headers == headers[:1]).all():
        return
    said = [bytes(h).rstrip(b"\0").decode(errors="replace") for h in headers]
    listing = "; ".join(f"rank {r}: {s}" for r, s in zip(members, said))
    err = CollectiveMismatchError(
        f"blu.parallel (MPI): the ranks disagree at one collective ({what}): {listing}. Every "
        "rank must call the same collectives in the same order, with operands of the same "
        "shape and dtype"
    )
    err.blu_settle = comm.settle  # type: ignore[attr-defined]
    raise err


class Job:
    """The exit notices of one MPI job (one per process, made by ``install_exit_hook``)."""

    def __init__(self, world: Any, MPI: Any):
        self.MPI = MPI
        self.notes = world.Dup()  # collective (initialize): notices never meet user messages
        self.rank = world.Get_rank()
        self.size = world.Get_size()
        self.comms: list[Any] = []  # the MpiCommunicators of this job (their counts)
        self.left: dict[int, dict[str, int]] = {}  # world rank -> its counts when it left

    def _drain(self) -> None:
        st = self.MPI.Status()
        while self.notes.iprobe(source=self.MPI.ANY_SOURCE, tag=TAG_EXIT, status=st):
            src = st.Get_source()
            self.left[src] = self.notes.recv(source=src, tag=TAG_EXIT)

    def check(self, comm: Any, number: int, what: str) -> None:
        """Raise ``RankExitedError`` when a member of ``comm`` left before entering its
        collective number ``number`` (0-based)."""
        self._drain()
        for r in comm.members:
            counts = self.left.get(r)
            if counts is None or counts.get(comm.id, 0) > number:
                continue
            msg = (
                f"blu.parallel (MPI): rank {r} exited while rank {self.rank} waits for it in "
                f"{what} (collective {number + 1} of its group {comm.members}; rank {r} "
                f"entered {counts.get(comm.id, 0)} of them). Every rank must run the same "
                "collectives; the job is aborted"
            )
            # its exit hook says it too, before either rank aborts the job
            self.notes.send(msg, dest=r, tag=TAG_BLAME)
            self.notes.recv(source=r, tag=TAG_ACK)
            raise RankExitedError(msg)

    def wait(self, req: Any, comm: Any, number: int, what: str) -> None:
        """Complete ``req`` (a request of ``comm``'s collective ``number``), or raise when a
        rank it needs has left."""
        spins = 0
        while not req.Test():
            self.check(comm, number, what)
            spins += 1
            time.sleep(0 if spins < 100 else min(0.002, 1e-5 * (spins - 99)))

    def at_exit(self) -> None:
        """Tell every rank this one left, then wait until all have left (or abort the job when
        one says it waits for this rank in a collective)."""
        if self.MPI.Is_finalized():  # the script finalized MPI itself: nothing to tell
            return
        counts = {c.id: c.count for c in self.comms}
        reqs = [self.notes.isend(counts, dest=r, tag=TAG_EXIT) for r in range(self.size)
                if r != self.rank]  # fmt: skip
        st, spins, blamed = self.MPI.Status(), 0, False
        while True:
            while self.notes.iprobe(source=self.MPI.ANY_SOURCE, tag=TAG_BLAME, status=st):
                src = st.Get_source()
                msg = self.notes.recv(source=src, tag=TAG_BLAME)
                if not blamed:
                    sys.stdout.flush()
                    sys.stderr.write(f"{msg}\n")
                    sys.stderr.flush()
                blamed = True
                self.notes.send(None, dest=src, tag=TAG_ACK)  # the other rank now raises
            self._drain()
            if len(self.left) == self.size - 1:
                break
            spins += 1
            time.sleep(0 if spins < 100 else min(0.01, 1e-4 * (spins - 99)))
        self.MPI.Request.Waitall(reqs)
        if blamed:  # the others left too (a rank caught the error): the job still failed
            self.MPI.COMM_WORLD.Abort(1)


_job: Job | None = None


def job() -> Job | None:
    """The exit notices of this process's MPI job (None before ``install_exit_hook``)."""
    return _job


def install_exit_hook(world: Any, MPI: Any) -> Job:
    """Collective over ``world`` (``initialize`` calls it on every rank): the exit hook of the
    module docstring. Registered after mpi4py's finalization, so it runs before it."""
    global _job
    if _job is None:
        _job = Job(world, MPI)
        if _job.size > 1:
            atexit.register(_job.at_exit)
    return _job
