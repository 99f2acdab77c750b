"""``sort`` and ``top_k`` (``blu.lax.sorting``) on CUDA targets: library nodes launching blu's
own bitonic kernels (``blu.lower.cuda.sort_kernels``: compiled or loaded when the executable is
built, so the kernel cache holds them ahead of time), with the pairs between global passes and
the permutations of several keys in the node's planned workspace; no host round trip.

The launch sequence of a pass (``launches``), for a row padded to ``P`` and tiles of ``t``:
``tsort`` sorts each tile in shared memory; when ``P > t``, for each merge size
``k = 2t .. P`` the stages ``j = k/2 .. t`` run as ``gstep`` launches over global memory and the
stages ``j < t`` as one ``tmerge`` launch per tile (the last, ``k = P``, finishes the pass):
``log2(P/t) (log2(P/t) + 1) / 2`` global stages in all (36 for 2**20 floats). Small ``top_k``
on long rows runs ``topk`` alone.

The simulated GPU (``BLU_FAKE_GPU=1``) compiles these kernels and runs the primitive's numpy
impl into the planned buffers.

Next, for speed on long rows: the global stages are memory bound (a read and a write of every
pair each); several of them fused per launch in registers (or a radix sort's histogram, scan
and scatter passes on the same keys, 4 passes of 8 bits for 32-bit keys) would cut the traffic
several times. For many short rows, a block holds one row: several rows per block would keep
the threads busy. For ``top_k``, a per-round filter against the current ``k``-th key would skip
most rounds' sorts.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from blu.lax import sorting
from blu.lower.cuda import sort_kernels as sk
from blu.lower.library import LibraryLowering, register_library
from blu.lower.mlir.cache import kernel_key
from blu.lower.mlir.llvm import symbol


@dataclasses.dataclass(frozen=True)
class Launch:
    func: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    kk: int = 0  # merge size (gstep, tmerge)
    lj: int = 0  # log2 of the stage's distance (gstep)


def launches(sp: sk.Spec) -> list[Launch]:
    """The kernels of ``sp`` in launch order (see the module doc)."""
    if sp.empty:
        return []
    if sp.select:
        return [Launch("topk", (sp.rows, 1, 1), (sp.threads(sp.tile), 1, 1))]
    t = sp.t
    tiles = (sp.rows * (sp.P // t), 1, 1)
    block = (sp.threads(t), 1, 1)
    steps = (-(-(sp.rows * sp.P // 2) // sk.STEP_THREADS), 1, 1)
    out = []
    for q in range(sp.passes):
        out.append(Launch(f"tsort{q}", tiles, block))
        kk = 2 * t
        while kk <= sp.P:
            j = kk // 2
            while j >= t:
                out.append(Launch("gstep", steps, (sk.STEP_THREADS, 1, 1), kk, j.bit_length() - 1))
                j //= 2
            out.append(Launch("tmerge" if kk < sp.P else f"tmerge{q}", tiles, block, kk))
            kk *= 2
    return out


def spec(prim: Any, avals, params: dict) -> sk.Spec:
    return sk.spec_of(prim.name, avals, params)


def _applies(avals, params, target: str) -> bool:
    return sk.supported([a.dtype for a in avals]) and 0 < len(avals) and avals[0].ndim > 0 \
        and max(a.shape[-1] if a.ndim else 1 for a in avals[:1]) < 2**31  # fmt: skip


_built: dict[str, sk.Spec] = {}  # module symbol -> the spec it was emitted for


def _kernels(prim: Any):
    def kernels(avals, params, target: str) -> list[tuple]:
        sp = spec(prim, avals, params)
        if sp.empty:
            return []
        canonical = sp.text()
        _built[symbol(kernel_key(canonical, target))] = sp
        return [(canonical, lambda sym: sk.emit(sp, sym), f"{prim.name} {sp}")]

    return kernels


def _gpu(prim: Any):
    def call(dev, stream, ins, outs, workspace, in_avals, out_avals, _modules=(), **params):
        if not _modules:  # nothing to write
            return
        mod = _modules[0]
        sp = _built.get(mod.name) or spec(prim, in_avals, params)
        ws = [workspace + off if nbytes else 0 for off, nbytes in sp.regions().values()]
        base = [*ins, *outs, *ws]
        for la in launches(sp):
            args = [*base, np.int64(la.kk), np.int64(la.lj)]
            mod.function(la.func).launch(la.grid, la.block, args, stream=stream)

    return call


def _host(prim: Any):
    """The simulated device's form: the numpy impl into the planned buffers."""

    def call(ins, outs, workspace, **params) -> None:
        for dst, r in zip(outs, prim.impl(*ins, **params), strict=True):
            dst[...] = r

    return call


def _workspace(prim: Any):
    def workspace(avals, params, target: str) -> int:
        return spec(prim, avals, params).workspace_bytes()

    return workspace


for _p in (sorting.sort_p, sorting.top_k_p):
    register_library(_p, LibraryLowering(workspace=_workspace(_p), cpu=_host(_p), gpu=_gpu(_p),
                                         kernels=_kernels(_p), applies=_applies),
                     platform="cuda")  # fmt: skip
