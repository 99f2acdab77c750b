"""NCCL collectives through nccl4py (``pip install nccl4py``; imported only on this path).

``NcclCommunicator`` has two layers:

- *pointer* methods (``all_reduce_ptr``, ...) take device addresses and a CUDA stream: what a
  GPU executable's collective nodes call (``blu/lower/cuda/collectives.py``), on its own
  stream, with the planned buffers;
- *host* methods (``all_reduce(x, op)``, ...) take numpy arrays, as the collectives' ``impl``
  does when run eagerly: they wait for the work queued on the device (a compiled program's
  collectives on another stream must not run beside these), copy to the device on the
  communicator's stream, call NCCL there, and copy back.

NVLink multicast (NVLS) is never enabled: ``NCCL_NVLS_ENABLE`` defaults to 0 here.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core.errors import BluError
from blu.parallel.comm import Communicator

_OPS = {"sum": 0, "prod": 1, "max": 2, "min": 3}
_DTYPES = {
    np.dtype(np.int8): 0,
    np.dtype(np.uint8): 1,
    np.dtype(np.int32): 2,
    np.dtype(np.uint32): 3,
    np.dtype(np.int64): 4,
    np.dtype(np.uint64): 5,
    np.dtype(np.float16): 6,
    np.dtype(np.float32): 7,
    np.dtype(np.float64): 8,
    np.dtype(dtypes.bfloat16): 9,
}


class NcclError(BluError, RuntimeError):
    """nccl4py or the CUDA driver is missing, or a call failed."""


def available() -> bool:
    """Whether nccl4py and a CUDA device can be used."""
    try:
        _modules()
        from cuda.bindings import driver as cu

        _check(cu.cuInit(0))
        err, n = cu.cuDeviceGetCount()
        return int(err) == 0 and n > 0
    except Exception:
        return False


def _modules():
    try:
        from nccl import core as nccl_core
        from nccl.bindings import nccl as nccl_bind
    except ImportError as e:  # pragma: no cover - depends on the machine
        raise NcclError(
            "the NCCL backend needs nccl4py (pip install nccl4py) and NCCL "
            f"(nvidia-nccl-cu12 / -cu13): {e}"
        ) from e
    return nccl_core, nccl_bind


def _check(res: Any) -> Any:
    """Unpack a cuda.bindings result tuple, raising on an error code."""
    if isinstance(res, tuple):
        err, rest = res[0], res[1:]
    else:
        err, rest = res, ()
    if int(err) != 0:
        raise NcclError(f"CUDA driver call failed: {err}")
    return rest[0] if len(rest) == 1 else rest


def _cuda_device(local_rank: int):
    try:
        from cuda.core import Device
    except ImportError:  # older cuda-core
        from cuda.core.experimental import Device  # type: ignore[no-redef]
    dev = Device(local_rank)
    dev.set_current()
    return dev


def new_unique_id() -> bytes:
    nccl_core, _ = _modules()
    return bytes(nccl_core.get_unique_id())


class NcclCommunicator(Communicator):
    """An NCCL communicator of this process's GPU, with its stream.

    Args:
        comm: an ``nccl.core.Communicator``.
        stream: the stream collectives run on (an int handle or an object with ``.handle``).
    """

    def __init__(self, comm: Any, stream: Any):
        self._nccl = comm
        self.stream = stream
        self.size = int(comm.nranks)
        self.rank = int(comm.rank)

    @classmethod
    def init(cls, nranks: int, rank: int, unique_id: bytes, local_rank: int) -> NcclCommunicator:
        """``ncclCommInitRank`` on GPU ``local_rank`` (collective over the ``nranks`` ranks)."""
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
        nccl_core, _ = _modules()
        dev = _cuda_device(local_rank)
        uid = nccl_core.UniqueId.from_bytes(unique_id)
        comm = nccl_core.Communicator.init(nranks, rank, uid)
        return cls(comm, dev.create_stream())

    def split(self, color: int, key: int) -> NcclCommunicator:
        """``ncclCommSplit``: members with the same color form a group, ordered by key."""
        return NcclCommunicator(self._nccl.split(color, key), self.stream)

    @property
    def _stream(self) -> int:
        s = self.stream
        h = getattr(s, "handle", s)
        return int(h)

    @property
    def _comm(self) -> Any:
        return self._nccl._comm

    # ---- pointer level: device buffers on a given stream ----------------------------------------

    def _call(self, fn_name: str, *args: Any) -> None:
        _, nb = _modules()
        fn = getattr(nb, fn_name)
        try:
            fn(*args[:-2], self._comm, args[-1])
        except TypeError:  # an older nccl4py takes the raw communicator pointer
            fn(*args[:-2], int(self._nccl.ptr), args[-1])

    def all_reduce_ptr(self, send: int, recv: int, count: int, dtype: Any, op: str, stream: int):
        self._call("all_reduce", send, recv, count, _nccl_dtype(dtype), _OPS[op], None, stream)

    def all_gather_ptr(self, send: int, recv: int, count: int, dtype: Any, stream: int):
        self._call("all_gather", send, recv, count, _nccl_dtype(dtype), None, stream)

    def reduce_scatter_ptr(self, send: int, recv: int, count: int, dtype: Any, stream: int):
        self._call(
            "reduce_scatter", send, recv, count, _nccl_dtype(dtype), _OPS["sum"], None, stream
        )

    def send_recv_ptr(
        self,
        sends: Sequence[tuple[int, int, int]],
        recvs: Sequence[tuple[int, int, int]],
        stream: int,
    ) -> None:
        """Grouped point-to-point: ``(ptr, nbytes, peer)`` to send and to receive."""
        _, nb = _modules()
        nb.group_start()
        try:
            for ptr, nbytes, peer in sends:
                self._call("send", ptr, nbytes, 1, peer, None, stream)
            for ptr, nbytes, peer in recvs:
                self._call("recv", ptr, nbytes, 1, peer, None, stream)
        finally:
            nb.group_end()

    # ---- host level: numpy in, numpy out --------------------------------------------------------

    def _run(self, x: np.ndarray, out_shape: tuple, body) -> np.ndarray:
        from cuda.bindings import driver as cu

        x = np.ascontiguousarray(x)
        out = np.empty(out_shape, x.dtype)
        if x.nbytes == 0 and out.nbytes == 0:
            return out
        s = self._stream
        # NCCL runs one communicator's operations one at a time: let a compiled program's,
        # queued on its executable's stream, finish first
        _check(cu.cuCtxSynchronize())
        send = _check(cu.cuMemAllocAsync(max(x.nbytes, 1), s))
        recv = _check(cu.cuMemAllocAsync(max(out.nbytes, 1), s))
        try:
            if x.nbytes:
                _check(cu.cuMemcpyHtoDAsync(send, x.ctypes.data, x.nbytes, s))
            body(int(send), int(recv), s)
            if out.nbytes:
                _check(cu.cuMemcpyDtoHAsync(out.ctypes.data, recv, out.nbytes, s))
        finally:
            _check(cu.cuMemFreeAsync(send, s))
            _check(cu.cuMemFreeAsync(recv, s))
            _check(cu.cuStreamSynchronize(s))
        return out

    def all_reduce(self, x, op):
        x, back = _reducible(x)
        out = self._run(
            x, x.shape, lambda a, b, s: self.all_reduce_ptr(a, b, x.size, x.dtype, op, s)
        )
        return back(out)

    def all_gather(self, x):
        raw = _as_bytes(x)

        def body(a, b, s):
            self.all_gather_ptr(a, b, raw.size, np.uint8, s)

        out = self._run(raw, (self.size,) + raw.shape, body)
        return out.view(x.dtype).reshape((self.size,) + np.shape(x))

    def reduce_scatter(self, x):
        x, back = _reducible(x)
        block = x.shape[1:]
        n = int(np.prod(block, dtype=np.int64))
        out = self._run(x, block, lambda a, b, s: self.reduce_scatter_ptr(a, b, n, x.dtype, s))
        return back(out)

    def all_to_all(self, x):
        raw = _as_bytes(x).reshape(self.size, -1)
        chunk = raw.shape[1]

        def body(a, b, s):
            sends = [(a + j * chunk, chunk, j) for j in range(self.size)]
            recvs = [(b + j * chunk, chunk, j) for j in range(self.size)]
            self.send_recv_ptr(sends, recvs, s)

        return self._run(raw, raw.shape, body).view(x.dtype).reshape(x.shape)

    def permute(self, x, perm):
        raw = _as_bytes(x).reshape(-1)
        src_of = {d: s for s, d in perm}
        dst_of = {s: d for s, d in perm}

        def body(a, b, s):
            sends = [(a, raw.size, dst_of[self.rank])] if self.rank in dst_of else []
            recvs = [(b, raw.size, src_of[self.rank])] if self.rank in src_of else []
            if sends or recvs:
                self.send_recv_ptr(sends, recvs, s)

        out = self._run(raw, raw.shape, body).view(x.dtype).reshape(x.shape)
        return out if self.rank in src_of else np.zeros_like(x)


def _nccl_dtype(dtype: Any) -> int:
    dt = np.dtype(dtype)
    if dt not in _DTYPES:
        raise NcclError(f"NCCL has no reduction for dtype {dt}")
    return _DTYPES[dt]


def _reducible(x: np.ndarray):
    """NCCL reduces 8/32/64-bit ints and floats: widen the others and narrow back."""
    x = np.asarray(x)
    if x.dtype in _DTYPES:
        return x, lambda y: y
    wide = np.int32 if x.dtype.kind in "iub" else np.float32
    return x.astype(wide), lambda y: y.astype(x.dtype)


def _as_bytes(x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x)
    return x.reshape(-1).view(np.uint8)
