"""The collectives on CUDA targets as library nodes (``NodeKind.LIBRARY``;
``blu/lower/collectives.py`` says what each does): NCCL on the planned device buffers, queued on
the executable's stream, with no host copies.

- ``psum``/``pmax``/``pmin``: ``ncclAllReduce`` (complex sums as sums of their float pairs);
- ``all_gather``: ``ncclAllGather`` of the operand's bytes (the result is stacked in member
  order on its leading axes);
- ``reduce_scatter``: ``ncclReduceScatter`` (the operand's leading axes are the members' blocks);
- ``all_to_all``: grouped ``ncclSend``/``ncclRecv`` of chunk j to and from member j;
- ``ppermute``: grouped send/recv pairs; a member that receives nothing writes zeros;
- ``axis_index``: this process's coordinate copied into the result.

A group of one member without NCCL (a mesh axis of size 1: ``SelfCommunicator``) copies on the
device. A communicator without device pointers (the TCP store, used by a GPU job without NCCL)
goes through host memory (labelled in ``_gpu``). Reductions of dtypes NCCL has no type for
(int16, uint16; max/min of complex) do not apply: they stay host fallback nodes (the impl
widens them).

The calls are not captured in CUDA graphs (``graph_safe=False``): the communicator is looked up
when the node runs (the process mesh of the call), which a replayed graph would not do, so a
program with collectives runs its steps one by one. On the simulated GPU (``BLU_FAKE_GPU=1``)
the lowering's CPU form runs on host views of the planned buffers (``collectives.host_call``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from blu.core import dtypes
from blu.lax import parallel
from blu.lower.collectives import COLLECTIVES, REDUCE_OPS, communicator, coordinate, host_call
from blu.lower.library import LibraryLowering, register_library

# the dtypes NCCL reduces (ncclDataType_t; blu.parallel.nccl._DTYPES)
NCCL_REDUCES = tuple(
    np.dtype(d)
    for d in (np.int8, np.uint8, np.int32, np.uint32, np.int64, np.uint64, np.float16,
              np.float32, np.float64, dtypes.bfloat16)
)  # fmt: skip
_COMPLEX_PARTS = {np.dtype(np.complex64): np.float32, np.dtype(np.complex128): np.float64}


def _nccl_type(dtype: Any, op: str) -> tuple[Any, int] | None:
    """``(dtype NCCL reduces, elements per element)`` of a reduction, or None."""
    dt = np.dtype(dtype)
    if dt in NCCL_REDUCES:
        return dt, 1
    if dt in _COMPLEX_PARTS and op == "sum":
        return np.dtype(_COMPLEX_PARTS[dt]), 2
    return None


def _applies(prim: Any):
    if prim in REDUCE_OPS:
        op = REDUCE_OPS[prim]
        return lambda avals, params, target: _nccl_type(avals[0].dtype, op) is not None
    if prim is parallel.reduce_scatter_p:
        return lambda avals, params, target: _nccl_type(avals[0].dtype, "sum") is not None
    return lambda avals, params, target: True


def _nbytes(aval: Any) -> int:
    return aval.size * np.dtype(aval.dtype).itemsize


def _gpu(prim: Any):
    def gpu(dev, stream, ins, outs, workspace, in_avals, out_avals, **params) -> None:
        (o,), (out_aval,) = outs, out_avals
        if prim is parallel.axis_index_p:
            dev.copy_h2d(o, np.asarray(coordinate(params), np.int32))
            return
        (x,), (x_aval,) = ins, in_avals
        comm = communicator(prim, params)
        if hasattr(comm, "all_reduce_ptr"):  # NCCL (a world of one too)
            _nccl(dev, comm, stream, prim, x, o, x_aval, out_aval, params)
        elif comm.size == 1:
            _one_member(dev, prim, x, o, x_aval, out_aval, params)
        else:  # no device pointers (the TCP store): through host memory
            host_in = np.empty(x_aval.shape, x_aval.dtype)
            host_out = np.empty(out_aval.shape, out_aval.dtype)
            dev.copy_d2h(host_in, x)
            host_call(prim)([host_in], [host_out], None, **params)
            dev.copy_h2d(o, host_out)

    return gpu


def _one_member(dev, prim, x, o, x_aval, out_aval, params) -> None:
    """A group of one: every collective is a copy (or zeros for a ppermute that sends
    nothing to itself)."""
    n = _nbytes(out_aval)
    if n and prim is parallel.ppermute_p and (0, 0) not in tuple(params["perm"]):
        dev.memset(o, 0, n)
    elif n:
        dev.copy_d2d(o, x, n)


def _nccl(dev, comm, stream, prim, x, o, x_aval, out_aval, params) -> None:
    """NCCL's call on the planned buffers ``x`` -> ``o`` (device addresses), on ``stream``."""
    if prim in REDUCE_OPS or prim is parallel.reduce_scatter_p:
        op = REDUCE_OPS.get(prim, "sum")
        dt, per = _nccl_type(x_aval.dtype, op)
        count = out_aval.size * per
        if not count:
            return
        if prim is parallel.reduce_scatter_p:
            comm.reduce_scatter_ptr(x, o, count, dt, stream)
        else:
            comm.all_reduce_ptr(x, o, count, dt, op, stream)
    elif prim is parallel.all_gather_p:
        if _nbytes(x_aval):
            comm.all_gather_ptr(x, o, _nbytes(x_aval), np.uint8, stream)
    elif prim is parallel.all_to_all_p:
        chunk = _nbytes(x_aval) // comm.size
        if chunk:
            sends = [(x + j * chunk, chunk, j) for j in range(comm.size)]
            recvs = [(o + j * chunk, chunk, j) for j in range(comm.size)]
            comm.send_recv_ptr(sends, recvs, stream)
    else:
        _permute(dev, comm, stream, x, o, _nbytes(x_aval), params["perm"])


def _permute(dev, comm, stream, x, o, n, perm) -> None:
    src_of = {d: s for s, d in perm}
    dst_of = {s: d for s, d in perm}
    me = comm.rank
    if not n:
        return
    if me not in src_of:  # nothing arrives: zeros (on the device's stream, the executable's)
        dev.memset(o, 0, n)
    sends = [(x, n, dst_of[me])] if me in dst_of else []
    recvs = [(o, n, src_of[me])] if me in src_of else []
    if sends or recvs:
        comm.send_recv_ptr(sends, recvs, stream)


def _workspace(avals, params, target) -> int:
    return 0  # NCCL keeps its own buffers


for _p in COLLECTIVES:
    register_library(
        _p,
        LibraryLowering(
            workspace=_workspace,
            cpu=host_call(_p),
            gpu=_gpu(_p),
            applies=_applies(_p),
            graph_safe=False,
        ),
        platform="cuda",
    )
