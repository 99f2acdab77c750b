"""The linear-algebra primitives and the FFT on CUDA targets as library lowerings
(``NodeKind.LIBRARY``): cuSOLVER/cuBLAS through ``blu.cuda.solver``'s kernels and cuFFT through
``blu.cuda.fft``, queued on the executable's stream.

The solver kernels allocate their results (and their own workspaces, info and pointer arrays)
from the device's caching allocator; the lowering copies each result into the node's planned
output buffer on the same stream. Several of them synchronize (cholesky, eigh and svd read
``info`` back; lu its pivots), so they are not captured in CUDA graphs (``graph_safe=False``).
"""

from __future__ import annotations

from typing import Any

from blu.cuda.array import DeviceArray
from blu.lax.fft import fft_p
from blu.lax.linalg.householder import geqrf_p, householder_product_p
from blu.lax.linalg.primitives import cholesky_p, eigh_p, lu_p, qr_p, svd_p, triangular_solve_p
from blu.lower.library import LibraryLowering, impl_into, register_library


def _solver_call(prim: Any) -> Any:
    def gpu(dev, stream, ins, outs, workspace, in_avals, out_avals, **params) -> None:
        from blu.cuda.solver import GPU_KERNELS

        args = [DeviceArray(dev, p, a.shape, a.dtype) for p, a in zip(ins, in_avals)]
        res = GPU_KERNELS[prim.name](*args, **params)
        res = res if prim.multiple_results else [res]
        for dst, r, a in zip(outs, res, out_avals):
            n = a.size * a.dtype.itemsize
            if n and r.ptr != dst:
                dev.copy_d2d(dst, r.ptr, n)

    return gpu


_LINALG = (cholesky_p, triangular_solve_p, lu_p, qr_p, eigh_p, svd_p, geqrf_p,
           householder_product_p)  # fmt: skip
for _p in _LINALG:
    register_library(
        _p,
        LibraryLowering(
            workspace=lambda avals, params, target: 0,  # the solver allocates its own
            cpu=impl_into(_p),
            gpu=_solver_call(_p),
            graph_safe=False,
        ),
        platform="cuda",
    )


def _fft_gpu(dev, stream, ins, outs, workspace, in_avals, out_avals, **params) -> None:
    from blu.cuda import fft

    (a,) = in_avals
    fft.execute(dev, stream, ins[0], outs[0], workspace, a.shape, a.dtype, **params)


def _fft_workspace(avals, params, target) -> int:
    from blu.cuda import fft

    (a,) = avals
    return fft.workspace_bytes(a.shape, a.dtype, params["fft_type"])


# cuFFT: no synchronization, the plan's work area made when the plan is (the first, eager call)
register_library(
    fft_p,
    LibraryLowering(workspace=_fft_workspace, cpu=impl_into(fft_p), gpu=_fft_gpu),
    platform="cuda",
)
