"""CPU kernels of the linear-algebra primitives: LAPACK/BLAS through numpy and scipy.

Each kernel is the primitive's ``impl`` (``blu.lax.linalg``): a plain function of numpy arrays
with any leading batch shape, so eager evaluation and compiled programs (where the primitives run
as library nodes) share it, and the CUDA runtime (``blu.cuda.solver``) falls back to it on host
copies. It needs only numpy, scipy and the core's config and errors, so both can import it.
The GPU kernels (cuSOLVER/cuBLAS) have the same signatures and conventions (see
``blu.lax.linalg``'s docstring). float16/bfloat16 are computed in float32.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core.config import config
from blu.core.errors import LinAlgError, with_user_line


def in_f32(fn: Callable) -> Callable:
    """Compute bfloat16/float16 in float32; cast float outputs back (integer outputs stay)."""

    def impl(*args: np.ndarray, **params: Any) -> Any:
        dt = args[0].dtype
        if dt not in (dtypes.bfloat16, dtypes.float16):
            return fn(*args, **params)
        outs = fn(*[a.astype(np.float32) for a in args], **params)
        back = lambda o: o.astype(dt) if np.issubdtype(o.dtype, np.floating) else o  # noqa: E731
        return [back(o) for o in outs] if isinstance(outs, (list, tuple)) else back(outs)

    return impl


def _degenerate(what: str, a: np.ndarray) -> None:
    """Degenerate input gives inf/NaN, or raises under ``blu.config.debug_nans``."""
    if config.debug_nans:
        raise LinAlgError(with_user_line(f"{what} (matrices of shape {a.shape}, dtype {a.dtype})"))


def _each_or_nan(np_fn: Callable, a: np.ndarray, what: str) -> list[np.ndarray]:
    """``np_fn`` (a batched numpy.linalg function returning a tuple) on the whole batch; if
    LAPACK fails for some matrix, redo it matrix by matrix and give the failing ones NaN."""
    with np.errstate(all="ignore"):
        try:
            return [np.asarray(o) for o in np_fn(a)]
        except np.linalg.LinAlgError:
            pass
        _degenerate(what, a)
        flat = a.reshape((-1,) + a.shape[-2:])
        good = next((m for m in flat if _ok(np_fn, m)), np.eye(*a.shape[-2:], dtype=a.dtype))
        proto = [np.asarray(p) for p in np_fn(good)]
        outs = [np.empty((len(flat),) + p.shape, p.dtype) for p in proto]
        for i, m in enumerate(flat):
            try:
                res = np_fn(m)
            except np.linalg.LinAlgError:
                res = [np.full(p.shape, np.nan, p.dtype) for p in proto]
            for o, r in zip(outs, res):
                o[i] = r
        return [o.reshape(a.shape[:-2] + o.shape[1:]) for o in outs]


def _ok(np_fn: Callable, m: np.ndarray) -> bool:
    try:
        np_fn(m)
        return True
    except np.linalg.LinAlgError:
        return False


@in_f32
def cholesky(a: np.ndarray) -> np.ndarray:
    """Lower Cholesky factors (LAPACK potrf, lower triangle read); NaN if not positive
    definite."""
    return _each_or_nan(lambda m: (np.linalg.cholesky(m),), a, "cholesky: not positive definite")[0]


@in_f32
def triangular_solve(
    a: np.ndarray, b: np.ndarray, *, left_side: bool, lower: bool, transpose_a: bool,
    unit_diagonal: bool,
) -> np.ndarray:  # fmt: skip
    """``op(a)^-1 b`` or ``b op(a)^-1`` by BLAS trsm, which divides by a zero diagonal
    (inf/NaN) where LAPACK's trtrs would refuse."""
    out = np.zeros(b.shape, b.dtype)
    if b.size == 0:
        return out
    if config.debug_nans and not unit_diagonal and not np.diagonal(a, 0, -2, -1).all():
        _degenerate("triangular_solve: singular (zero diagonal) matrix", a)
    import scipy.linalg  # imported on first use: it would slow down `import blu`

    (trsm,) = scipy.linalg.get_blas_funcs(("trsm",), (a, b))
    for i in np.ndindex(b.shape[:-2]):
        out[i] = trsm(1.0, a[i], b[i], side=int(not left_side), lower=int(lower),
                      trans_a=int(transpose_a), diag=int(unit_diagonal))  # fmt: skip
    return out


@in_f32
def lu(a: np.ndarray) -> list[np.ndarray]:
    """LU with partial pivoting (LAPACK getrf): ``[lu, pivots, permutation]``, int32 0-based."""
    n = a.shape[-1]
    lu = np.array(a, copy=True)
    piv = np.zeros(a.shape[:-1], np.int32)
    perm = np.broadcast_to(np.arange(n, dtype=np.int32), a.shape[:-1]).copy()
    if a.size == 0:
        return [lu, piv, perm]
    import scipy.linalg

    (getrf,) = scipy.linalg.get_lapack_funcs(("getrf",), (a,))
    singular = False
    for i in np.ndindex(a.shape[:-2]):
        lu[i], p, info = getrf(a[i])
        singular |= info > 0  # an exactly zero pivot: U is singular
        piv[i] = p
        for j, pj in enumerate(p):  # apply the row swaps to the identity permutation
            perm[i + (j,)], perm[i + (pj,)] = perm[i + (pj,)], perm[i + (j,)]
    if singular:
        _degenerate("lu: singular matrix", a)
    return [lu, piv, perm]


@in_f32
def qr(a: np.ndarray, *, full_matrices: bool) -> list[np.ndarray]:
    """Householder QR (LAPACK geqrf + orgqr): ``[q, r]``."""
    q, r = np.linalg.qr(a, mode="complete" if full_matrices else "reduced")
    return [q, r]


@in_f32
def eigh(a: np.ndarray, *, lower: bool) -> list[np.ndarray]:
    """Symmetric eigen-decomposition (LAPACK syevd): ``[v, w]``, ``w`` ascending."""
    uplo = "L" if lower else "U"
    w, v = _each_or_nan(lambda m: np.linalg.eigh(m, uplo), a, "eigh: no convergence")
    return [v, w]


@in_f32
def svd(a: np.ndarray, *, full_matrices: bool, compute_uv: bool) -> list[np.ndarray]:
    """SVD (LAPACK gesdd): ``[s, u, vt]`` (or ``[s]``), ``s`` descending."""
    if not compute_uv:
        fn = lambda m: (np.linalg.svd(m, compute_uv=False),)  # noqa: E731
        return _each_or_nan(fn, a, "svd: no convergence")
    fn = lambda m: np.linalg.svd(m, full_matrices=full_matrices)  # noqa: E731
    u, s, vt = _each_or_nan(fn, a, "svd: no convergence")
    return [s, u, vt]


def _lapack(name: str, a: np.ndarray) -> Callable:
    import scipy.linalg

    (fn,) = scipy.linalg.get_lapack_funcs((name,), (a,))
    return fn


@in_f32
def geqrf(a: np.ndarray) -> list[np.ndarray]:
    """Householder QR in LAPACK's compact form (geqrf): ``[a_out, taus]``, ``R`` in the upper
    triangle of ``a_out``, the reflectors' vectors below the diagonal (their unit first entry
    implicit) and their scales ``taus`` ``(..., min(m, n))``."""
    *batch, m, n = a.shape
    out = np.array(a, copy=True)
    taus = np.zeros((*batch, min(m, n)), a.dtype)
    if a.size == 0:
        return [out, taus]
    fn = _lapack("geqrf", a)
    for i in np.ndindex(*batch):
        out[i], taus[i], _, _ = fn(a[i])
    return [out, taus]


@in_f32
def householder_product(a: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """The first ``n`` columns of ``H_1 ... H_k`` (LAPACK orgqr, ungqr for complex) from the
    reflectors below the diagonal of ``a`` ``(..., m, n)``, ``m >= n``, and ``taus``
    ``(..., k)``, ``k <= n`` (the identity's columns for ``k = 0``)."""
    out = np.zeros(a.shape, a.dtype)
    if a.size == 0:
        return out
    fn = _lapack("ungqr" if np.iscomplexobj(a) else "orgqr", a)
    for i in np.ndindex(*a.shape[:-2]):
        out[i] = fn(a[i], taus[i])[0]
    return out
