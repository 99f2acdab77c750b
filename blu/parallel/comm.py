"""Communicators: the collectives of one process group, on host (numpy) arrays.

- ``SelfCommunicator``: a group of one process.
- ``StoreCommunicator``: CPU processes exchanging bytes through the job's TCP store (slow, but
  lets multi-process sharded programs run and be tested without a GPU).
- ``NcclCommunicator`` (``blu.parallel.nccl``): NCCL through nccl4py, on a CUDA stream.

Every method takes this process's block and returns the result; ``all_gather`` stacks the
members' blocks on a new leading axis (member order), ``reduce_scatter`` and ``all_to_all``
take a leading axis of one chunk per member. The ``*_into`` methods write the result into a
given C-contiguous array instead (a compiled program's planned buffer: the collectives' library
nodes, ``blu/lower/collectives.py``); here they copy the result in, ``MpiCommunicator`` has MPI
write it there.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class Communicator:
    """A process group: ``size`` members, this process being member ``rank``."""

    size: int
    rank: int

    def all_reduce(self, x: np.ndarray, op: str) -> np.ndarray:
        raise NotImplementedError

    def all_gather(self, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def reduce_scatter(self, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def all_to_all(self, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def permute(self, x: np.ndarray, perm: Sequence[tuple[int, int]]) -> np.ndarray:
        raise NotImplementedError

    def barrier(self) -> None:
        self.all_reduce(np.zeros((1,), np.int32), "sum")

    # ---- into a given buffer (``out``: C-contiguous, the result's shape and dtype) ---------------

    def all_reduce_into(self, x: np.ndarray, out: np.ndarray, op: str, work=None) -> None:
        """``out[...] = all_reduce(x, op)``; ``work``: optional uint8 scratch of
        ``8 * x.size`` bytes for dtypes reduced in float32."""
        np.copyto(out, self.all_reduce(x, op))

    def all_gather_into(self, x: np.ndarray, out: np.ndarray) -> None:
        np.copyto(out, self.all_gather(x).reshape(out.shape))

    def reduce_scatter_into(self, x: np.ndarray, out: np.ndarray, work=None) -> None:
        np.copyto(out, self.reduce_scatter(x).reshape(out.shape))

    def all_to_all_into(self, x: np.ndarray, out: np.ndarray) -> None:
        np.copyto(out, self.all_to_all(x))

    def permute_into(self, x: np.ndarray, out: np.ndarray, perm: Sequence[tuple[int, int]]):
        np.copyto(out, self.permute(x, perm))


def contiguous(x: np.ndarray) -> np.ndarray:
    """``x`` as a C-contiguous array of the same shape (``np.ascontiguousarray`` alone turns a
    0-d array into shape ``(1,)``, which would make a replicated scalar come back as ``(1,)``)."""
    x = np.asarray(x)
    return np.ascontiguousarray(x).reshape(x.shape)


def _reduce(parts: Sequence[np.ndarray], op: str) -> np.ndarray:
    # in member order, so every member computes the same bits
    acc = np.array(parts[0], copy=True)
    for p in parts[1:]:
        if op == "sum":
            acc = acc + p
        elif op == "max":
            acc = np.maximum(acc, p)
        else:
            acc = np.minimum(acc, p)
    return acc.astype(parts[0].dtype)


class SelfCommunicator(Communicator):
    """The group of this process alone."""

    size, rank = 1, 0

    def all_reduce(self, x, op):
        return np.array(x, copy=True)

    def all_gather(self, x):
        return np.array(x, copy=True)[None]

    def reduce_scatter(self, x):
        return np.array(x[0], copy=True)

    def all_to_all(self, x):
        return np.array(x, copy=True)

    def permute(self, x, perm):
        return np.array(x, copy=True) if (0, 0) in tuple(perm) else np.zeros_like(x)


class StoreCommunicator(Communicator):
    """Collectives of CPU processes through a key-value store.

    Args:
        store: a ``TCPStore`` (shared by the job).
        members: the global ranks of the group, in member order.
        global_rank: this process's global rank (one of ``members``).
        tag: a prefix that tells this group's keys apart from other groups'.
    """

    def __init__(self, store, members: Sequence[int], global_rank: int, tag: str):
        self.store = store
        self.members = list(members)
        self.size = len(self.members)
        self.rank = self.members.index(global_rank)
        self.tag = tag
        self._seq = 0

    def _exchange(self, x: np.ndarray) -> list[np.ndarray]:
        x = contiguous(x)
        base = f"{self.tag}/{self._seq}"
        self._seq += 1
        self.store.set(f"{base}/{self.rank}", x.tobytes())
        parts = [
            np.frombuffer(self.store.get(f"{base}/{i}"), x.dtype).reshape(x.shape)
            for i in range(self.size)
        ]
        if self.store.add(f"{base}/done", 1) == self.size:  # everyone has read: clean up
            for i in range(self.size):
                self.store.delete(f"{base}/{i}")
            self.store.delete(f"{base}/done")
        return parts

    def all_reduce(self, x, op):
        return _reduce(self._exchange(x), op)

    def all_gather(self, x):
        return np.stack(self._exchange(x))

    def reduce_scatter(self, x):
        return _reduce([p[self.rank] for p in self._exchange(x)], "sum")

    def all_to_all(self, x):
        return np.stack([p[self.rank] for p in self._exchange(x)])

    def permute(self, x, perm):
        parts = self._exchange(x)
        src_of = {d: s for s, d in perm}
        if self.rank not in src_of:
            return np.zeros_like(x)
        return np.array(parts[src_of[self.rank]], copy=True)
