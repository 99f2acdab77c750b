"""The collectives as library nodes (``NodeKind.LIBRARY``, issue #35): with one process per
device, a compiled program's ``psum``/``pmax``/``pmin`` (all-reduce), ``all_gather``,
``reduce_scatter`` (``psum_scatter``), ``all_to_all``, ``ppermute`` and ``axis_index`` read their
operand from and write their result into the plan's buffers, instead of running their impl on a
host copy.

The primitives are already in their stacked forms (``blu/lax/parallel.py``): ``all_gather``
stacks the members' blocks on a new leading axis and ``reduce_scatter``/``all_to_all`` take one
chunk per member on a leading axis, so each is one library call on a contiguous buffer; the
``axis``/``tiled`` variants are transposes and reshapes around it in the jaxpr, which the plan
fuses or views like any other data movement.

The communicator is looked up when the node runs, as the impl does
(``blu.transforms.axes.process_env_for``: the process mesh binding the names, e.g. MPI or NCCL
sub-communicators). This module holds what both targets share: that lookup and the host call
(``host_call``: the communicator's ``*_into`` methods on the planned buffers: MPI writing into
them on the CPU, ``blu/lower/cpu/collectives.py``; the simulated GPU's form of the CUDA
lowering, ``blu/lower/cuda/collectives.py``, whose device form calls NCCL on the executable's
stream).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from blu.core import dtypes
from blu.lax import parallel
from blu.transforms.axes import process_env_for

REDUCE_OPS = {parallel.psum_p: "sum", parallel.pmax_p: "max", parallel.pmin_p: "min"}
COLLECTIVES = (
    *REDUCE_OPS,
    parallel.all_gather_p,
    parallel.reduce_scatter_p,
    parallel.all_to_all_p,
    parallel.ppermute_p,
    parallel.axis_index_p,
)

# dtypes MPI does not reduce: reduced in float32 (``MpiCommunicator``), in the node's workspace
_WIDENED = (np.dtype(dtypes.bfloat16), np.dtype(np.float16))


def axis_names(params: dict) -> tuple:
    """The axis names of a collective's params (a tuple for the reductions and the stacked
    gathers, one name for ``ppermute``/``all_to_all``/``axis_index``)."""
    names = params["axis_name"]
    return tuple(names) if isinstance(names, (tuple, list)) else (names,)


def communicator(prim: Any, params: dict) -> Any:
    """The communicator of this process's group along the collective's axes (a
    ``blu.parallel.comm.Communicator``), looked up as the primitive's impl does."""
    names = axis_names(params)
    return process_env_for(names, prim.name).comm_for(names)


def coordinate(params: dict) -> int:
    """This process's index along ``axis_index``'s axis."""
    (name,) = axis_names(params)
    return int(process_env_for((name,), "axis_index").coords[name])


def host_workspace(avals: Sequence[Any], params: dict, target: str) -> int:
    """Bytes of float32 scratch for the operand and the result of a reduction whose dtype MPI
    does not reduce (bfloat16, float16); 0 otherwise."""
    if not avals or avals[0].dtype not in _WIDENED:
        return 0
    return 8 * avals[0].size


def host_call(prim: Any) -> Callable[..., None]:
    """``cpu(ins, outs, workspace, **params)`` of the library lowering of collective ``prim``:
    the communicator's ``*_into`` method from the operand buffer into the result buffer."""
    if prim is parallel.axis_index_p:

        def index(ins, outs, workspace, **params) -> None:
            outs[0][...] = coordinate(params)

        return index

    def call(ins, outs, workspace, **params) -> None:
        (x,), (out,) = ins, outs
        comm = communicator(prim, params)
        if prim in REDUCE_OPS:
            comm.all_reduce_into(x, out, REDUCE_OPS[prim], workspace)
        elif prim is parallel.all_gather_p:  # (*sizes, *x.shape): member order, first name major
            comm.all_gather_into(x, out.reshape((comm.size,) + x.shape))
        elif prim is parallel.reduce_scatter_p:
            n = math.prod(params["axis_sizes"])
            comm.reduce_scatter_into(x.reshape((n,) + out.shape), out, workspace)
        elif prim is parallel.all_to_all_p:
            comm.all_to_all_into(x, out)
        else:
            comm.permute_into(x, out, params["perm"])

    return call
