"""Solvers and matrix functions: solve, solve_triangular, inv, det, slogdet, lstsq, pinv,
matrix_power, matrix_rank.

Composed from the ``blu.lax.linalg`` primitives with ordinary blu operations, so they
differentiate, batch and compile through them: square solves, ``inv``, ``det`` and ``slogdet``
go through one LU factorization; ``lstsq``, ``pinv`` and ``matrix_rank`` through the SVD.
"""

from __future__ import annotations

import operator
from typing import Any, NamedTuple

import numpy as np

from blu.core.errors import BluValueError, with_user_line
from blu.lax import linalg as lax_linalg
from blu.numpy._dtypes import int32
from blu.numpy._promote import asarray_operand, to_inexact
from blu.numpy.complexes import imag
from blu.numpy.creation import arange, asarray, ones_like, zeros, zeros_like
from blu.numpy.linalg._util import (
    abs2,
    diag_part,
    dtype,
    eps,
    eye_like,
    matrices,
    mH,
    mT,
    rhs,
    shape,
)
from blu.numpy.logic import equal, greater, not_equal
from blu.numpy.manipulation import expand_dims, ndim, squeeze
from blu.numpy.products import matmul
from blu.numpy.reductions import all as _all
from blu.numpy.reductions import any as _any
from blu.numpy.reductions import max as _max
from blu.numpy.reductions import min as _min
from blu.numpy.reductions import prod
from blu.numpy.reductions import sum as _sum
from blu.numpy.selection import where
from blu.numpy.transcendental import log
from blu.numpy.ufuncs import abs as _abs
from blu.numpy.ufuncs import sign as _sign
from blu.transforms.custom_derivatives import custom_jvp


class SlogdetResult(NamedTuple):
    """What :func:`blu.numpy.linalg.slogdet` returns: ``sign`` and ``logabsdet``, with
    ``det = sign * exp(logabsdet)``."""

    sign: Any
    logabsdet: Any


# ---- LU based ----------------------------------------------------------------------------------


def _lu_solve(lu: Any, perm: Any, b: Any) -> Any:
    """``a^-1 b`` from ``a``'s LU factors: ``U^-1 L^-1 P b``."""
    pb = matmul(lax_linalg.permutation_matrix(perm, dtype(b)), b)
    y = lax_linalg.triangular_solve(lu, pb, left_side=True, lower=True, unit_diagonal=True)
    return lax_linalg.triangular_solve(lu, y, left_side=True, lower=False)


def solve(a: Any, b: Any) -> Any:
    """Solve ``a @ x = b``, as ``numpy.linalg.solve`` (numpy 2 rules).

    Args:
        a: ``(..., n, n)`` array.
        b: one vector ``(n,)``, or ``(..., n, k)`` matrices whose batch dimensions broadcast
            with ``a``'s (a stack of vectors is ``b[..., None]``).

    Returns:
        ``x`` with ``b``'s (broadcast) shape. Through an LU factorization with partial
        pivoting; an exactly singular ``a`` gives inf/NaN (numpy raises; ``LinAlgError`` under
        ``blu.config.debug_nans``). Differentiable in ``a`` and ``b``.
    """
    a, b, vector = rhs(matrices(a, "solve", True), b, "solve")
    lu, _, perm = lax_linalg.lu(a)
    x = _lu_solve(lu, perm, b)
    return squeeze(x, -1) if vector else x


def inv(a: Any) -> Any:
    """Inverse of square matrices ``(..., n, n)`` (``numpy.linalg.inv``), as ``solve(a, I)``;
    an exactly singular matrix gives inf/NaN (``LinAlgError`` under ``blu.config.debug_nans``).
    """
    a = matrices(a, "inv", True)
    return solve(a, eye_like(a))


def solve_triangular(
    a: Any, b: Any, trans: int | str = 0, lower: bool = False, unit_diagonal: bool = False
) -> Any:
    """Solve ``op(a) @ x = b`` for triangular ``a``, as ``scipy.linalg.solve_triangular``.

    Args:
        a: ``(..., n, n)``; only its ``lower`` (else upper) triangle is read, and not its
            diagonal with ``unit_diagonal`` (taken as ones).
        b: vectors or matrices, as for ``solve``.
        trans: 0/'N' (``a``), 1/'T' (``a.T``) or 2/'C' (``a^H``, the conjugate transpose;
            ``a.T`` for real ``a``).

    Returns:
        ``x`` with ``b``'s (broadcast) shape; a zero diagonal gives inf/NaN.
    """
    if trans not in (0, 1, 2, "N", "T", "C"):
        raise BluValueError(with_user_line(f"linalg.solve_triangular: bad trans {trans!r}"))
    a, b, vector = rhs(matrices(a, "solve_triangular", True), b, "solve_triangular")
    x = lax_linalg.triangular_solve(
        a, b, left_side=True, lower=lower, transpose_a=trans not in (0, "N"),
        conjugate_a=trans in (2, "C"), unit_diagonal=unit_diagonal,
    )  # fmt: skip
    return squeeze(x, -1) if vector else x


def _lu_sign_and_diag(a: Any) -> tuple[Any, Any]:
    """The permutation's sign (+-1) and ``U``'s diagonal, from an LU factorization."""
    lu, pivots, _ = lax_linalg.lu(a)
    n = shape(a)[-1]
    swaps = _sum(not_equal(pivots, arange(n, dtype=pivots.dtype)), axis=-1)
    sign = where(equal(swaps % 2, 0), 1.0, -1.0).astype(dtype(a))
    return sign, diag_part(lu)


def _det_fun(a: Any) -> Any:
    sign, d = _lu_sign_and_diag(a)
    return sign * prod(d, axis=-1)


_det = custom_jvp(_det_fun)


def _cofactors_by_minors(a: Any) -> Any:
    """``C[..., i, j] = (-1)^(i+j) det(a without row i and column j)``, each minor's determinant
    by ``_det`` itself: a polynomial in ``a``, exact at singular matrices of any rank, and so
    are its derivatives (each order recurses one size down). O(n^5); only for near-singular
    input (see ``_cofactors``)."""
    n = shape(a)[-1]
    others = np.array([[k for k in range(n) if k != i] for i in range(n)], np.int32)
    minors = a[..., others[:, None, :, None], others[None, :, None, :]]
    signs = np.where(np.add.outer(np.arange(n), np.arange(n)) % 2 == 0, 1.0, -1.0)
    return _det(minors) * signs.astype(dtype(a))


def _cofactors(a: Any, det_a: Any) -> Any:
    """The cofactor matrix ``det(a) * inv(a)^T`` (the adjugate's transpose), the gradient of
    ``det``. Well-conditioned input (every LU pivot above sqrt(eps) times the largest) uses the
    inverse; otherwise the minors' determinants, which stay exact where ``inv`` does not exist."""
    from blu import lax

    n = shape(a)[-1]
    if n == 1:
        return ones_like(a)
    _, d = _lu_sign_and_diag(a)
    mag = _abs(d)
    ok = _all(_min(mag, axis=-1) > np.sqrt(eps(a)) * _max(mag, axis=-1))

    def by_inverse(a, det_a):
        return det_a[..., None, None] * mT(solve(a, eye_like(a)))

    def by_minors(a, det_a):
        return _cofactors_by_minors(a)

    return lax.cond(ok, by_inverse, by_minors, a, det_a)


@_det.defjvp
def _det_jvp(primals, tangents):
    """``d det(a) = sum(cofactors(a) * da)`` (Jacobi's formula, with the adjugate in place of
    ``det(a) inv(a)``, so it holds at singular matrices too)."""
    (a,), (da,) = primals, tangents
    out = _det(a)
    if shape(a)[-1] == 0:
        return out, zeros_like(out)
    return out, _sum(_cofactors(a, out) * da, axis=(-2, -1))


def det(a: Any) -> Any:
    """Determinants ``(...)`` of ``(..., n, n)`` matrices (``numpy.linalg.det``), from the LU
    factorization. The derivative is Jacobi's formula with the cofactor matrix, so it is exact
    at singular matrices too, at every order (near-singular input takes an O(n^5) path through
    the minors; see ``_cofactors``)."""
    return _det(matrices(a, "det", True))


def slogdet(a: Any, *, method: str | None = None) -> SlogdetResult:
    """Sign and log of the absolute determinant (``numpy.linalg.slogdet``), from the LU
    factorization: ``SlogdetResult(sign (...), logabsdet (...))``. A singular matrix gives
    sign 0 and logabsdet -inf. The gradient of logabsdet is ``inv(a).T``.

    ``method``: JAX's ``None``/``'lu'`` or ``'qr'``; ``'qr'`` (JAX's, for TPUs, where LU's
    pivoting is slow) is computed by the LU factorization too: the same values to rounding.

    Raises:
        BluValueError: another ``method``.
    """
    if method not in (None, "lu", "qr"):
        raise BluValueError(
            with_user_line(f"linalg.slogdet: method must be None, 'lu' or 'qr', got {method!r}")
        )
    a = matrices(a, "slogdet", True)
    _, d = _lu_sign_and_diag(a)
    return SlogdetResult(_slogdet_sign(a), _sum(log(_abs(d)), axis=-1))


def _slogdet_sign_fun(a: Any) -> Any:
    sign, d = _lu_sign_and_diag(a)
    return sign * prod(_sign(d), axis=-1)


_slogdet_sign = custom_jvp(_slogdet_sign_fun)


@_slogdet_sign.defjvp
def _slogdet_sign_jvp(primals, tangents):
    """Real ``a``: the sign is piecewise constant (tangent 0). Complex: ``sign = det/|det|`` and
    ``d log det = tr(a^-1 da)``, so ``d sign = i Im(tr(a^-1 da)) sign`` (as JAX); 0 where
    ``a`` is singular (sign 0)."""
    (a,), (da,) = primals, tangents
    sign = _slogdet_sign(a)
    if not np.issubdtype(dtype(a), np.complexfloating) or shape(a)[-1] == 0:
        return sign, zeros_like(sign)
    tr = _sum(diag_part(solve(a, da)), axis=-1)
    dsign = where(equal(sign, 0), 0, sign * (1j * imag(tr)).astype(dtype(a)))
    return sign, dsign


def matrix_power(a: Any, n: int) -> Any:
    """``a`` to the integer power ``n`` (static), by repeated squaring; ``n < 0`` inverts
    first and ``n == 0`` gives identities (``numpy.linalg.matrix_power``). The result has
    ``a``'s dtype, integers too, except that ``n < 0`` makes integers the default float (as
    JAX)."""
    try:
        n = operator.index(n)
    except TypeError:
        raise BluValueError(
            with_user_line(f"linalg.matrix_power: n must be a Python int, got {n!r}")
        ) from None
    a = matrices(a, "matrix_power", True, inexact=n < 0)
    if n == 0:
        return eye_like(a)
    if n < 0:
        a, n = inv(a), -n
    result = None
    while n:
        if n & 1:
            result = a if result is None else matmul(result, a)
        n >>= 1
        if n:
            a = matmul(a, a)
    return result


# ---- SVD based ---------------------------------------------------------------------------------


def _pinv_fun(a: Any, rtol: float) -> Any:
    """Pseudo-inverse dropping singular values ``<= rtol * max(s)``."""
    m, n = shape(a)[-2:]
    if min(m, n) == 0:
        return zeros(shape(a)[:-2] + (n, m), dtype(a))
    u, s, vt = lax_linalg.svd(a, full_matrices=False)
    large = greater(s, rtol * s[..., :1])  # s is descending
    s_inv = where(large, 1.0 / where(large, s, 1.0), 0.0).astype(dtype(a))
    return matmul(mH(vt), s_inv[..., :, None] * mH(u))  # V S^+ U^H


_pinv = custom_jvp(_pinv_fun, nondiff_argnums=(1,))


@_pinv.defjvp
def _pinv_jvp(rtol, primals, tangents):
    """``dP = -P dA P + P P^H dA^H (I - A P) + (I - P A) dA^H P^H P`` (Golub & Pereyra 1973,
    "The differentiation of pseudo-inverses and nonlinear least squares problems", eq. 4.12;
    ``^H`` the conjugate transpose, ``^T`` for reals), valid while the rank is locally constant;
    unlike differentiating the SVD it needs no distinct singular values."""
    (a,), (da,) = primals, tangents
    p = _pinv(a, rtol)
    mm = matmul
    dat = mH(da)
    t = -mm(mm(p, da), p)
    m, n = shape(a)[-2:]
    t = t + mm(mm(p, mH(p)), mm(dat, eye_like(a, m) - mm(a, p)))
    t = t + mm(eye_like(a, n) - mm(p, a), mm(dat, mm(mH(p), p)))
    return p, t


def pinv(a: Any, rcond: float | None = None, hermitian: bool = False, *, rtol: Any = None) -> Any:
    """Moore-Penrose pseudo-inverse ``(..., n, m)`` of ``(..., m, n)`` matrices
    (``numpy.linalg.pinv``), from the SVD.

    Args:
        a: ``(..., m, n)`` array.
        rcond, rtol: singular values ``<= rtol * max(s)`` are dropped (``rcond`` is numpy's
            older name). Default as JAX: ``10 * max(m, n) * eps`` of ``a``'s dtype (numpy's
            1e-15 would keep float32 rounding noise and invert it into huge entries). A Python
            float uses the Golub-Pereyra derivative below; an array (broadcast against the
            batch axes ``...``, as the Array API allows) differentiates through the SVD.
        hermitian: ``a`` must then be square or empty (numpy's and JAX's rule); the general
            SVD is used either way.

    Returns:
        The pseudo-inverse. Its derivative uses the Golub-Pereyra formula (valid where the rank
        does not change; exact at repeated singular values to first order; higher orders
        differentiate the SVD, so they need distinct singular values).
    """
    if rcond is not None and rtol is not None:
        raise BluValueError(with_user_line("linalg.pinv: give rcond or rtol, not both"))
    tol = rcond if rcond is not None else rtol
    a = matrices(a, "pinv")
    if hermitian and min(shape(a)[-2:]) > 0:  # (empty matrices are exempt, as numpy's and JAX's)
        a = matrices(a, "pinv", True)
    if tol is not None and (ndim(tol) > 0 or not isinstance(tol, (int, float, np.generic))):
        # an array of tolerances (one per matrix, broadcast over the batch axes): the cut-off
        # is a value, so differentiate through the SVD (needs distinct singular values)
        tol = asarray(tol)
        return _pinv_fun(a, expand_dims(tol, -1) if ndim(tol) else tol)
    if tol is None:  # JAX's default: the rounding noise of the SVD, relative to max(s)
        return _pinv(a, 10.0 * max(shape(a)[-2:]) * eps(a))
    return _pinv(a, _static_float(tol, "pinv"))


def _static_float(x: Any, name: str) -> float:
    try:
        return float(np.asarray(x))
    except Exception:  # a tracer: the cutoff must be known when tracing
        raise BluValueError(
            with_user_line(f"linalg.{name}: the tolerance must be a Python float, got {x!r}")
        ) from None


def lstsq(
    a: Any, b: Any, rcond: float | None = None, *, numpy_resid: bool = False
) -> tuple[Any, Any, Any, Any]:
    """Least-squares solution of ``a @ x = b``, as ``numpy.linalg.lstsq`` (also batched).

    Args:
        a: ``(..., m, n)`` array.
        b: one vector ``(m,)`` or ``(..., m, k)`` matrices (batch dimensions broadcast).
        rcond: singular values ``<= rcond * max(s)`` count as zero (static float); default
            ``eps * max(m, n)`` (numpy's default); a negative ``rcond`` means ``eps`` of ``a``'s
            dtype (numpy's and JAX's).

    Returns:
        ``(x, residuals, rank, s)``: the minimum-norm solution ``(..., n)`` or ``(..., n, k)``;
        the squared residual norms ``(..., k)`` (``(..., 1)`` for a vector ``b``, as JAX), always
        computed (numpy gives an empty array when ``rank < n`` or ``m <= n``: JAX's
        ``numpy_resid=True`` does too, for one matrix ``a`` with a concrete rank); ``rank``
        int32 ``(...)``; ``s`` the singular values ``(..., min(m, n))``. Differentiable in
        ``a`` and ``b`` (through ``pinv``'s derivative).

    Raises:
        BluValueError: ``numpy_resid=True`` with a stack of matrices ``a`` (numpy's empty
            residuals are per matrix).
        ConcretizationError: ``numpy_resid=True`` under ``jit`` (the rank decides the shape).
    """
    if numpy_resid and ndim(a) != 2:
        raise BluValueError(
            with_user_line(
                f"linalg.lstsq: numpy_resid=True needs one matrix a, got shape {np.shape(a)}"
            )
        )
    a, b, vector = rhs(matrices(a, "lstsq"), b, "lstsq")
    m, n = shape(a)[-2:]
    tol = eps(a) * max(m, n) if rcond is None else _static_float(rcond, "lstsq")
    tol = eps(a) if tol < 0 else tol  # numpy's and JAX's: a negative rcond means eps
    x = matmul(_pinv(a, tol), b)
    r = b - matmul(a, x)
    resid = _sum(abs2(r), axis=-2)
    s = lax_linalg.svd(a, compute_uv=False)
    rank = _rank(s, tol)
    if numpy_resid and (m <= n or int(rank) < n):
        resid = zeros((0,), dtype(resid))
    return (squeeze(x, -1) if vector else x), resid, rank, s


def _rank(s: Any, rtol: float) -> Any:
    if shape(s)[-1] == 0:
        return zeros(shape(s)[:-1], int32)
    return _sum(greater(s, rtol * s[..., :1]), axis=-1, dtype=int32)


def matrix_rank(A: Any, tol: Any = None, hermitian: bool = False, *, rtol: Any = None) -> Any:
    """Number of singular values ``> tol`` (absolute) or ``> rtol * max(s)`` (default
    ``rtol = eps * max(m, n)``) of ``(..., m, n)`` matrices, as int32 ``(...)``
    (``numpy.linalg.matrix_rank``). ``tol`` and ``rtol`` may be arrays (one value per matrix,
    broadcast against the batch axes ``...``) or traced. A vector (or scalar) ``A`` has rank 1
    unless it is all zeros (numpy's and JAX's). ``hermitian=True`` needs square matrices (as
    numpy's and JAX's) and is otherwise ignored (the SVD is used either way)."""
    if tol is not None and rtol is not None:
        raise BluValueError(with_user_line("linalg.matrix_rank: give tol or rtol, not both"))
    A = to_inexact(asarray_operand(A))
    if ndim(A) < 2:
        return _any(not_equal(A, 0)).astype(int32)
    A = matrices(A, "matrix_rank", bool(hermitian))
    s = lax_linalg.svd(A, compute_uv=False)
    if tol is not None:
        return _sum(greater(s, _per_matrix(tol)), axis=-1, dtype=int32)
    m, n = shape(A)[-2:]
    if rtol is None or isinstance(rtol, (int, float, np.generic)):
        return _rank(s, eps(A) * max(m, n) if rtol is None else float(rtol))
    # (no singular values: s[..., :1] is empty and the count 0, of the batch that rtol's
    # shape broadcasts with s's)
    return _sum(greater(s, _per_matrix(rtol) * s[..., :1]), axis=-1, dtype=int32)


def _per_matrix(tol: Any) -> Any:
    """A tolerance against singular values ``(..., k)``: a Python number as it is, an array of
    one value per matrix ``(...)`` with a trailing axis to broadcast along ``k``."""
    if isinstance(tol, (int, float)) or ndim(tol) == 0:
        return tol
    return expand_dims(asarray(tol), -1)
