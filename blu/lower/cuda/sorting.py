"""``sort`` and ``top_k`` (``blu.lax.sorting``) on CUDA targets: library nodes launching blu's
own kernels (compiled or loaded when the executable is built, so the kernel cache holds them
ahead of time), with the radix sort's pairs and counts and the permutations of several keys in
the node's planned workspace; no host round trip.

The launch sequence (``launches``): a row of one tile (``n <= tile``) is one ``tsort{q}`` launch
per key, a block per row, bitonic in shared memory (``blu.lower.cuda.sort_kernels``); small
``top_k`` on long rows runs ``topk`` alone; longer rows are radix sorted
(``blu.lower.cuda.sort_radix``): per 8-bit digit pass a histogram (``rh*``), the scan of the
counts (``rscan``) and the ranking scatter (``rs*``), 4 passes (12 launches) for float32 keys.

The simulated GPU (``BLU_FAKE_GPU=1``) compiles these kernels and runs the primitive's numpy
impl into the planned buffers.

Next: several short rows per block (a block holds one row of the tile kernels); the radix
sort's histograms all counted in one read up front and the scan chained through the scatter
(Onesweep's decoupled look-back), one launch per pass.
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import Any

from blu.cuda.driver import pack_args
from blu.lax import sorting
from blu.lower.cuda import sort_kernels as sk
from blu.lower.cuda import sort_radix
from blu.lower.library import LibraryLowering, register_library
from blu.lower.mlir.cache import kernel_key
from blu.lower.mlir.llvm import symbol


@dataclasses.dataclass(frozen=True)
class Launch:
    func: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    kk: int = 0  # unused
    lj: int = 0  # the digit's bit offset (radix passes)


def launches(sp: sk.Spec) -> list[Launch]:
    """The kernels of ``sp`` in launch order (see the module doc)."""
    if sp.empty:
        return []
    if sp.select:
        return [Launch("topk", (sp.rows, 1, 1), (sp.threads(sp.tile), 1, 1))]
    if not sp.radix:
        return [Launch(f"tsort{q}", (sp.rows, 1, 1), (sp.threads(sp.P), 1, 1))
                for q in range(sp.passes)]  # fmt: skip
    blocks, block = (sp.rows * sp.blocks, 1, 1), (sk.RADIX_THREADS, 1, 1)
    out = []
    for ps in sort_radix.passes(sp):
        out.append(Launch(ps.hist, blocks, block, lj=ps.shift))
        out.append(Launch("rscan", (sp.rows, 1, 1), block))
        out.append(Launch(ps.scatter, blocks, block, lj=ps.shift))
    return out


def emit(sp: sk.Spec, sym: str) -> str:
    """The ``gpu.module @sym`` of ``sp``'s kernels: the radix sort's or the tile kernels'."""
    return sort_radix.emit(sp, sym) if sp.radix else sk.emit(sp, sym)


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
        return [(canonical, lambda sym: emit(sp, sym), f"{prim.name} {sp}")]

    return kernels


_plans: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # module -> its launches


def _plan(mod: Any, sp: sk.Spec) -> list[tuple]:
    """``(function, grid, block, lj)`` per launch of ``sp`` from the loaded module ``mod``."""
    plan = _plans.get(mod)
    if plan is None:
        plan = [(mod.function(la.func), la.grid, la.block, la.lj) for la in launches(sp)]
        _plans[mod] = plan
    return plan


def _gpu(prim: Any):
    def call(dev, stream, ins, outs, workspace, in_avals, out_avals, _modules=(), **params):
        if not _modules:  # nothing to write
            return
        mod = _modules[0]
        sp = _built.get(mod.name) or spec(prim, in_avals, params)
        ws = [workspace + off if nbytes else 0 for off, nbytes in sp.regions().values()]
        # the parameters packed once (device addresses, then ``kk`` and ``lj``): only ``lj``
        # changes between launches (each launch's values are copied by the driver)
        slots, pointers = pack_args([*ins, *outs, *ws, 0, 0])
        for fn, grid, block, lj in _plan(mod, sp):
            slots[-1] = lj
            fn.launch_packed(grid, block, pointers, stream=stream)

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
