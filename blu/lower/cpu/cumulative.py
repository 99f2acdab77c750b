"""The CPU's library lowerings of the cumulative primitives (``blu.lax.cumulative``): blu's own
MLIR kernel per problem (``blu.lower.mlir.cumulative``), compiled through the host compiler and
its disk cache when the executable first runs it, called on the planned buffers. The running
values of a scan along a leading axis live in planned scratch (the node's workspace). Large
problems are split by rows (the axes before the scanned one) across blu's threads.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import numpy as np

from blu.lower.cpu import blas
from blu.lower.cpu import threads as cpu_threads
from blu.lower.library import LibraryLowering, register_library
from blu.lower.mlir import cumulative as mc
from blu.lower.mlir import llvm as mlir_cpu

MIN_THREADED_ELEMS = 1 << 20  # elements at which a problem is split across threads

_kernels: dict[mc.Spec, mlir_cpu.Kernel] = {}


def kernel(sp: mc.Spec) -> mlir_cpu.Kernel:
    """The compiled CPU kernel of ``sp`` (a non-empty problem)."""
    k = _kernels.get(sp)
    if k is None:
        k = _kernels[sp] = mlir_cpu.get_kernel(sp.text("cpu"), lambda sym: mc.emit_cpu(sp, sym),
                                               f"cumulative {sp}")  # fmt: skip
    return k


def _call(k: mlir_cpu.Kernel, addrs: Sequence[int]) -> None:
    ptrs = (ctypes.c_void_p * len(addrs))(*addrs)
    base = ctypes.addressof(ptrs)
    k.fn((ctypes.c_void_p * len(addrs))(*[base + 8 * i for i in range(len(addrs))]))


def run(prim: Any, x: np.ndarray, out: np.ndarray, workspace: np.ndarray | None,
        params: dict) -> None:  # fmt: skip
    """Write ``prim(x, **params)`` into ``out`` with the compiled kernel(s)."""
    sp = mc.spec_of(prim, x, params)
    if sp.size == 0:
        return
    x = np.ascontiguousarray(x)
    dense = out if out.flags.c_contiguous else np.empty(out.shape, out.dtype)
    threads = cpu_threads.split(sp.outer, _threads(sp))
    need = sp.workspace_bytes()
    if need and (workspace is None or workspace.nbytes < need * len(threads)):
        workspace = np.empty(need * len(threads), np.uint8)
    row = sp.n * sp.inner
    xi, oi = x.dtype.itemsize, dense.dtype.itemsize

    def part(lo: int, hi: int, j: int = 0) -> None:
        k = kernel(mc.spec_of(prim, x, params, hi - lo))
        addrs = [x.ctypes.data + lo * row * xi, dense.ctypes.data + lo * row * oi]
        if need:
            addrs.append(workspace.ctypes.data + j * need)
        _call(k, addrs)

    if len(threads) <= 1:
        part(0, sp.outer)
    else:
        for lo, hi in threads:  # compiled (or loaded) once, before the threads start
            kernel(mc.spec_of(prim, x, params, hi - lo))
        slot = {c: j for j, c in enumerate(threads)}
        cpu_threads.run_parts(lambda lo, hi: part(lo, hi, slot[(lo, hi)]), threads)
    if dense is not out:
        out[...] = dense


def _threads(sp: mc.Spec) -> int:
    if sp.size < MIN_THREADED_ELEMS or sp.outer < 2:
        return 1
    return blas.threads_for(float("inf"))


def _workspace(prim: Any):
    def workspace(avals, params, target: str) -> int:
        sp = mc.spec_of(prim, avals[0], params)
        return sp.workspace_bytes() * (1 if _threads(sp) <= 1 else _threads(sp))

    return workspace


def cpu_call(prim: Any):
    """The library call running ``prim`` with the compiled kernels (also the simulated GPU's)."""

    def call(ins, outs, workspace, **params) -> None:
        run(prim, ins[0], outs[0], workspace, params)

    return call


for _p in mc.PRIMS:
    register_library(_p, LibraryLowering(workspace=_workspace(_p), cpu=cpu_call(_p), gpu=None,
                                         applies=mc.supported),
                     platform="cpu")  # fmt: skip
