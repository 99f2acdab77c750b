"""Library lowerings: a primitive whose work one library call does (cuSOLVER today, cuDNN
attention next) becomes a launch-plan node of kind ``NodeKind.LIBRARY``. Its outputs get planned
buffers (arena, outputs or donated arguments), its workspace is planned scratch, and on the GPU
the call is queued on the executable's stream (so a CUDA graph can capture it).

    register_library(cholesky_p, LibraryLowering(workspace=..., cpu=None, gpu=potrf_call,
                                                 applies=lambda avals, params, target: ...),
                     platform="cuda")

Registered from each backend's folder (``blu.lax`` never imports ``blu.lower``), per platform:
the registration is the primitive's ``lowerings[("library", platform)]`` slot, so
``docs/primitives.md`` shows it and one backend's lowering never reaches another's plans.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from blu.core.aval import ShapedArray
from blu.core.primitive import Primitive
from blu.lower.target import platform_of


@dataclasses.dataclass(frozen=True)
class LibraryLowering:
    """How a library call does a primitive.

    Attributes:
        workspace: bytes of scratch the call needs, from the operands' avals, the params and
            the target (``"cpu"``, ``"cuda:sm_90"``).
        cpu: ``cpu(ins, outs, workspace, **params)``: write the results into ``outs`` (numpy
            arrays in planned buffers); ``workspace`` a uint8 array or None. The CPU's call;
            for a CUDA lowering, the simulated device's (``BLU_FAKE_GPU=1``: host memory).
        gpu: ``gpu(dev, stream, ins, outs, workspace, in_avals, out_avals, **params)``: queue
            the work on ``stream``; ``ins``/``outs``/``workspace`` device pointers (ints).
            None: no GPU call.
        applies: whether this lowering applies to these avals/params on this target (e.g.
            cuDNN only for bf16/fp16).
        graph_safe: whether the GPU call may be captured in a CUDA graph (False for calls
            that synchronize, e.g. to read a status back).
        kernels: for calls that launch blu's own kernels: ``kernels(avals, params, target)``
            lists ``(canonical, emit, label)`` of each kernel module (as
            ``mlir_gpu.get_module`` takes them). The executable compiles or loads them when it
            is built (so the kernel cache holds them ahead of time) and passes the modules to
            ``gpu`` as ``_modules``.
        product: the call is a matrix product: ``gpu`` also gets ``_precision``, the
            product's precision under the executable's default (as a ``dot_general`` node's).
        inplace: the position of an input the (single) result may be written over when that
            input is read by nothing later (the memory plan decides; the call must then work
            with the two pointers equal), or None.
        precision: ``gpu`` also gets ``_precision`` (as ``product``'s), without being a product
            (a convolution: its TF32 engines follow the executable's precision, which its
            plan's workspace was sized under, not the configuration at the call).
    """

    workspace: Callable[[Sequence[ShapedArray], dict, str], int]
    cpu: Callable[..., None] | None
    gpu: Callable[..., None] | None
    applies: Callable[[Sequence[ShapedArray], dict, str], bool] = lambda avals, params, target: True
    graph_safe: bool = True
    kernels: Callable[[Sequence[ShapedArray], dict, str], list[tuple]] | None = None
    product: bool = False
    inplace: int | None = None
    precision: bool = False


def register_library(prim: Primitive, lowering: LibraryLowering, platform: str | None = None):
    """Make ``lowering`` the library lowering of ``prim`` on ``platform`` (``"cpu"`` or
    ``"cuda"``; None: on the CPU if it has a ``cpu`` call and on CUDA if it has a ``gpu`` call)."""
    platforms = (
        [platform]
        if platform
        else [p for p, call in (("cpu", lowering.cpu), ("cuda", lowering.gpu)) if call]
    )
    for p in platforms:
        prim.lowerings[("library", p)] = lowering


def registered(prim: Primitive, platform: str) -> LibraryLowering | None:
    """The library lowering registered for ``prim`` on ``platform``, if any."""
    return prim.lowerings.get(("library", platform))


def lowering_for(eqn: Any, target: str) -> LibraryLowering | None:
    """The library lowering of an equation on ``target`` (``"cpu"`` or ``"cuda:sm_XX"``), if
    one is registered for its platform and applies to its operands."""
    lw = registered(eqn.primitive, platform_of(target))
    if lw is None:
        return None
    avals = [a.aval for a in eqn.invars]
    return lw if lw.applies(avals, eqn.params, target) else None


def workspace_bytes(eqn: Any, target: str) -> int:
    lw = registered(eqn.primitive, platform_of(target))
    return int(lw.workspace([a.aval for a in eqn.invars], eqn.params, target))


def impl_into(prim: Primitive) -> Callable[..., None]:
    """A ``cpu`` call that runs ``prim``'s numpy impl and writes its results into the planned
    output buffers (one copy each): for libraries that allocate their own results (LAPACK
    through numpy/scipy), on the CPU and on the simulated GPU (``BLU_FAKE_GPU=1``)."""

    def cpu(ins, outs, workspace, **params) -> None:
        res = prim.impl(*ins, **params)
        for dst, r in zip(outs, res if prim.multiple_results else [res], strict=True):
            dst[...] = r

    return cpu
