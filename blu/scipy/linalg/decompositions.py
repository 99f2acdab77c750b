"""Factorizations and solvers of ``jax.scipy.linalg``: ``cholesky``, ``cho_factor``,
``cho_solve``, ``solve_triangular``, ``solve``, ``lu``, ``lu_factor``, ``lu_solve``, ``inv``,
``det``, ``eigh``, ``qr``, ``svd`` and ``polar``, with JAX's signatures, defaults and return
types, composed from the ``blu.lax.linalg`` primitives (so they differentiate, batch and
compile through them). SciPy's ``overwrite_*`` and ``check_finite`` arguments are accepted and
ignored, as in JAX."""

from __future__ import annotations

from typing import Any

from blu import lax
from blu.core import dtypes
from blu.core.errors import BluShapeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.lax import linalg as lax_linalg
from blu.numpy import linalg as np_linalg
from blu.numpy._promote import asarray_operand, broadcast_to
from blu.numpy.complexes import conj
from blu.numpy.creation import arange, eye, tril, triu
from blu.numpy.linalg._util import dtype, mH, mT, promote_inexact, shape
from blu.numpy.logic import equal
from blu.numpy.manipulation import squeeze
from blu.numpy.products import matmul
from blu.numpy.reductions import sum as _sum
from blu.numpy.selection import take_along_axis, where
from blu.scipy.linalg._checks import matrices, solve_operands
from blu.scipy.linalg._lu_rect import lu_rect
from blu.transforms.custom_derivatives import custom_jvp

# ---- Cholesky --------------------------------------------------------------------------------


def cholesky(a: Any, lower: bool = False, overwrite_a: bool = False, check_finite: bool = True):
    """Cholesky factor of Hermitian positive-definite matrices, as
    ``jax.scipy.linalg.cholesky``.

    Args:
        a: ``(..., n, n)`` array; integers and bools are promoted to the default float.
        lower: return the lower factor ``L`` (``a = L @ L^H``; ``^H`` the conjugate transpose)
            and read only ``a``'s lower triangle; else (the default, SciPy's) the upper factor
            ``U`` (``a = U^H @ U``) from the upper triangle. The other triangle of the result is
            zero. The derivative is that of the triangle read (as JAX's).

    Returns:
        ``(..., n, n)`` triangular factor; a matrix that is not positive definite gives NaN
        (SciPy raises; ``LinAlgError`` under ``blu.config.debug_nans``).

    Raises:
        BluShapeError: ``a`` is not ``(..., n, n)``.
    """
    del overwrite_a, check_finite
    a = matrices(a, "cholesky")
    L = lax_linalg.cholesky(a if lower else mH(a), symmetrize_input=False)
    return L if lower else mH(L)


def cho_factor(
    a: Any, lower: bool = False, overwrite_a: bool = False, check_finite: bool = True
) -> tuple[Any, bool]:
    """``(c, lower)``: the Cholesky factor ``cholesky(a, lower)`` and which triangle it is, for
    :func:`cho_solve` (``jax.scipy.linalg.cho_factor``; unlike SciPy's, the other triangle of
    ``c`` is zero)."""
    del overwrite_a, check_finite
    return cholesky(a, lower=lower), lower


def _cho_solve(c: Any, b: Any, lower: bool) -> Any:
    """``(c c^H)^-1 b`` for lower ``c`` (else ``(c^H c)^-1 b`` for upper), ``b`` matrices."""
    y = lax_linalg.triangular_solve(
        c, b, left_side=True, lower=lower, transpose_a=not lower, conjugate_a=not lower
    )
    return lax_linalg.triangular_solve(
        c, y, left_side=True, lower=lower, transpose_a=lower, conjugate_a=lower
    )


def cho_solve(
    c_and_lower: tuple[Any, bool], b: Any, overwrite_b: bool = False, check_finite: bool = True
) -> Any:
    """Solve ``a @ x = b`` from ``(c, lower) = cho_factor(a)`` (``jax.scipy.linalg.cho_solve``).

    Args:
        c_and_lower: the Cholesky factor ``(..., m, m)`` and whether it is lower.
        b: ``(..., m)`` (one dimension fewer than ``c``: vectors) or ``(..., m, k)``; batch
            dimensions broadcast with ``c``'s.

    Returns:
        ``x`` with ``b``'s (broadcast) shape, in the promoted float dtype.

    Raises:
        BluShapeError: the shapes do not fit (named in the message).
    """
    del overwrite_b, check_finite
    c, lower = c_and_lower
    c, b, vector = solve_operands(c, b, "cho_solve")
    x = _cho_solve(c, b, bool(lower))
    return squeeze(x, -1) if vector else x


# ---- triangular and general solves ------------------------------------------------------------

_TRANS = {0: (False, False), "N": (False, False), 1: (True, False), "T": (True, False),
          2: (True, True), "C": (True, True)}  # fmt: skip


def _trans(trans: Any, name: str) -> tuple[bool, bool]:
    try:
        return _TRANS[trans]
    except (KeyError, TypeError):
        raise BluValueError(
            with_user_line(
                f"scipy.linalg.{name}: trans must be 0, 1, 2, 'N', 'T' or 'C', got {trans!r}"
            )
        ) from None


def solve_triangular(
    a: Any, b: Any, trans: int | str = 0, lower: bool = False, unit_diagonal: bool = False,
    overwrite_b: bool = False, debug: Any = None, check_finite: bool = True,
) -> Any:  # fmt: skip
    """Solve ``op(a) @ x = b`` for triangular ``a`` (``jax.scipy.linalg.solve_triangular``).

    Args:
        a: ``(..., m, m)``; only its ``lower`` (else upper, the default) triangle is read, and
            not its diagonal with ``unit_diagonal`` (taken as ones).
        b: ``(..., m)`` (one dimension fewer than ``a``: vectors) or ``(..., m, k)``; batch
            dimensions broadcast.
        trans: 0/'N' (``a``), 1/'T' (``a.T``) or 2/'C' (``a^H``, the conjugate transpose).

    Returns:
        ``x`` with ``b``'s (broadcast) shape; a zero diagonal gives inf/NaN.

    Raises:
        BluShapeError: the shapes do not fit. BluValueError: a bad ``trans``.
    """
    del overwrite_b, debug, check_finite
    transpose_a, conjugate_a = _trans(trans, "solve_triangular")
    a, b, vector = solve_operands(a, b, "solve_triangular")
    x = lax_linalg.triangular_solve(
        a, b, left_side=True, lower=bool(lower), transpose_a=transpose_a,
        conjugate_a=conjugate_a, unit_diagonal=bool(unit_diagonal),
    )  # fmt: skip
    return squeeze(x, -1) if vector else x


def _pos_solve_fun(a: Any, b: Any, lower: bool) -> Any:
    return _cho_solve(cholesky(a, lower=lower), b, lower)


_pos_solve = custom_jvp(_pos_solve_fun, nondiff_argnums=(2,))


@_pos_solve.defjvp
def _pos_solve_jvp(lower, primals, tangents):
    """``dx = a^-1 (db - da x)``, reusing the factor (JAX's ``custom_linear_solve`` with the
    matrix-vector product ``a @ x``: the derivative is that of ``a`` as a full matrix)."""
    (a, b), (da, db) = primals, tangents
    c = cholesky(a, lower=lower)
    x = _cho_solve(c, b, lower)
    return x, _cho_solve(c, db - matmul(da, x), lower)


def solve(
    a: Any, b: Any, lower: bool = False, overwrite_a: bool = False, overwrite_b: bool = False,
    debug: bool = False, check_finite: bool = True, assume_a: str = "gen",
) -> Any:  # fmt: skip
    """Solve ``a @ x = b`` (``jax.scipy.linalg.solve``).

    Args:
        a: ``(..., m, m)`` array.
        b: right-hand sides. With ``assume_a`` 'gen', 'sym' or 'her' this is
            :func:`blu.numpy.linalg.solve` (as JAX's): ``b`` is one vector ``(m,)`` or
            ``(..., m, k)`` matrices. With 'pos' (Hermitian positive definite: a Cholesky
            factorization of the ``lower`` (else upper) triangle) ``b`` is ``(..., m)`` (one
            dimension fewer than ``a``: vectors) or ``(..., m, k)``, as :func:`cho_solve`.
        lower: the triangle read with ``assume_a='pos'``.
        assume_a: 'gen', 'sym', 'her' (an LU factorization) or 'pos'.

    Returns:
        ``x`` with ``b``'s (broadcast) shape. With 'pos' the derivative treats ``a`` as the
        full matrix of the product ``a @ x`` (``dx = a^-1 (db - da x)``, as JAX's).

    Raises:
        BluValueError: an unknown ``assume_a``. BluShapeError: the shapes do not fit.
    """
    del overwrite_a, overwrite_b, debug, check_finite
    if assume_a not in ("gen", "sym", "her", "pos"):
        raise BluValueError(
            with_user_line(
                f"scipy.linalg.solve: assume_a must be 'gen', 'sym', 'her' or "
                f"'pos', got {assume_a!r}"
            )
        )
    if assume_a != "pos":
        return np_linalg.solve(matrices(a, "solve"), b)
    a, b, vector = solve_operands(a, b, "solve")
    x = _pos_solve(a, b, bool(lower))
    return squeeze(x, -1) if vector else x


def inv(a: Any, overwrite_a: bool = False, check_finite: bool = True) -> Any:
    """Inverse of ``(..., n, n)`` matrices (``jax.scipy.linalg.inv``: ``blu.numpy.linalg.inv``);
    an exactly singular matrix gives inf/NaN (SciPy raises)."""
    del overwrite_a, check_finite
    return np_linalg.inv(matrices(a, "inv"))


def det(a: Any, overwrite_a: bool = False, check_finite: bool = True) -> Any:
    """Determinants ``(...)`` of ``(..., n, n)`` matrices (``jax.scipy.linalg.det``:
    ``blu.numpy.linalg.det``, differentiable at singular matrices too)."""
    del overwrite_a, check_finite
    return np_linalg.det(matrices(a, "det"))


# ---- LU --------------------------------------------------------------------------------------


def lu(
    a: Any, permute_l: bool = False, overwrite_a: bool = False, check_finite: bool = True
) -> tuple[Any, ...]:
    """LU decomposition with partial pivoting (``jax.scipy.linalg.lu``): ``a = p @ l @ u``.

    Args:
        a: ``(..., m, n)`` matrices, square or not.
        permute_l: return ``(p @ l, u)`` instead.

    Returns:
        ``(p, l, u)`` with ``k = min(m, n)``: the permutation matrices ``p`` ``(..., m, m)`` in
        ``a``'s real dtype, unit-lower ``l`` ``(..., m, k)`` and upper ``u`` ``(..., k, n)``;
        or ``(p @ l, u)``. Differentiable (JAX's rule; rectangular ``a`` through
        :mod:`blu.scipy.linalg._lu_rect`).

    Raises:
        BluShapeError: ``a`` has fewer than two dimensions.
    """
    del overwrite_a, check_finite
    a = matrices(a, "lu", square=False)
    m, n = shape(a)[-2:]
    if m != n:
        lu_, _, perm = lu_rect(a)
        p = mT(lax_linalg.permutation_matrix(perm, dtypes.real_dtype(dtype(a))))
        k = min(m, n)
        l_ = tril(lu_[..., :, :k], -1) + eye(m, k, dtype=dtype(a))
        u = triu(lu_[..., :k, :])
        return (matmul(p, l_), u) if permute_l else (p, l_, u)
    lu_, _, perm = lax_linalg.lu(a)
    # a = p @ a[perm] = p @ l @ u; p is real for complex a too (as SciPy's and JAX's)
    p = mT(lax_linalg.permutation_matrix(perm, dtypes.real_dtype(dtype(a))))
    l_ = tril(lu_, -1) + eye(n, dtype=dtype(a))
    u = triu(lu_)
    return (matmul(p, l_), u) if permute_l else (p, l_, u)


def lu_factor(a: Any, overwrite_a: bool = False, check_finite: bool = True) -> tuple[Any, Any]:
    """``(lu, piv)`` (``jax.scipy.linalg.lu_factor``): ``l`` (unit diagonal implied) below the
    diagonal of ``lu`` ``(..., m, n)`` and ``u`` on and above it; ``piv`` ``(..., k)`` int32,
    ``k = min(m, n)``, are LAPACK's 0-based row swaps (row ``i`` was swapped with row
    ``piv[i]``). :func:`lu_solve` takes square factors only (as JAX's)."""
    del overwrite_a, check_finite
    a = matrices(a, "lu_factor", square=False)
    if shape(a)[-1] != shape(a)[-2]:
        lu_, piv, _ = lu_rect(a)
        return lu_, piv
    lu_, piv, _ = lax_linalg.lu(a)
    return lu_, piv


def _pivots_to_permutation(piv: Any) -> Any:
    """The permutation ``(..., n)`` that LAPACK's row swaps ``piv`` ``(..., n)`` apply, in
    order: swap entries ``i`` and ``piv[i]`` for ``i = 0 .. n-1``."""
    n = shape(piv)[-1]
    idx = arange(n, dtype=dtype(piv))
    perm0 = idx + (piv - piv)  # the identity with piv's batch shape

    def swap(i: Any, perm: Any) -> Any:
        at_i = equal(idx, i)
        p_i = _sum(where(at_i, piv, 0), axis=-1, keepdims=True)
        v_i = _sum(where(at_i, perm, 0), axis=-1, keepdims=True)
        v_p = take_along_axis(perm, p_i, axis=-1)
        return where(at_i, v_p, where(equal(idx, p_i), v_i, perm))

    return lax.fori_loop(0, n, swap, perm0)


def lu_solve(
    lu_and_piv: tuple[Any, Any], b: Any, trans: int = 0, overwrite_b: bool = False,
    check_finite: bool = True,
) -> Any:  # fmt: skip
    """Solve ``op(a) @ x = b`` from ``(lu, piv) = lu_factor(a)`` (``jax.scipy.linalg.lu_solve``).

    Args:
        lu_and_piv: :func:`lu_factor`'s result.
        b: ``(..., n)`` (one dimension fewer than ``lu``: vectors) or ``(..., n, k)``; batch
            dimensions broadcast.
        trans: 0 (``a``), 1 (``a.T``) or 2 (``a^H``), or 'N', 'T', 'C'.

    Returns:
        ``x`` with ``b``'s (broadcast) shape.

    Raises:
        BluShapeError: the shapes do not fit. BluValueError: a bad ``trans``.
    """
    del overwrite_b, check_finite
    lu_, piv = lu_and_piv
    transpose, conj = _trans(trans, "lu_solve")
    lu_, b, vector = solve_operands(lu_, b, "lu_solve")
    if shape(piv)[-1:] != shape(lu_)[-1:]:
        raise BluShapeError(
            with_user_line(
                f"scipy.linalg.lu_solve: piv {get_aval(piv).str_short()} does not "
                f"fit lu {get_aval(lu_).str_short()}"
            )
        )
    P = lax_linalg.permutation_matrix(_pivots_to_permutation(piv), dtype(b))  # P a = l u
    ts = lax_linalg.triangular_solve
    if not transpose:  # a^-1 b = u^-1 l^-1 P b
        y = ts(lu_, matmul(P, b), left_side=True, lower=True, unit_diagonal=True)
        x = ts(lu_, y, left_side=True, lower=False)
    else:  # op(a) = op(u) op(l) P: x = P^T op(l)^-1 op(u)^-1 b
        kw = {"left_side": True, "transpose_a": True, "conjugate_a": conj}
        y = ts(lu_, b, lower=False, **kw)
        x = matmul(mH(P), ts(lu_, y, lower=True, unit_diagonal=True, **kw))
    return squeeze(x, -1) if vector else x


# ---- eigen, QR, singular value and polar decompositions ---------------------------------------


def eigh(
    a: Any, b: Any = None, lower: bool = True, eigvals_only: bool = False,
    overwrite_a: bool = False, overwrite_b: bool = False, turbo: bool = True,
    eigvals: Any = None, type: int = 1, check_finite: bool = True,
) -> Any:  # fmt: skip
    """Eigenvalues and eigenvectors of Hermitian matrices (``jax.scipy.linalg.eigh``).

    Args:
        a: ``(..., n, n)`` array; ``(a + a^H) / 2`` is decomposed (as JAX's).
        b, eigvals, type: only the standard problem (``b=None``, ``eigvals=None``, ``type=1``)
            is supported, as in JAX.
        lower: the triangle LAPACK reads (the input is symmetrized first, so the result does
            not depend on it).
        eigvals_only: return only the eigenvalues.

    Returns:
        ``(w, v)``: eigenvalues ``(..., n)`` ascending and eigenvectors ``(..., n, n)`` in the
        columns of ``v``; or ``w``. Eigenvector derivatives are inf/NaN at repeated
        eigenvalues (see :func:`blu.numpy.linalg.eigh`).

    Raises:
        BluValueError: ``b``, ``eigvals`` or ``type`` other than the defaults.
        BluShapeError: ``a`` is not square matrices.
    """
    del overwrite_a, overwrite_b, turbo, check_finite
    for arg, val, default in (("b", b, None), ("eigvals", eigvals, None), ("type", type, 1)):
        if val is not default and not (arg == "type" and val == 1):
            raise BluValueError(
                with_user_line(
                    f"scipy.linalg.eigh: only {arg}={default!r} is supported "
                    "(as jax.scipy.linalg.eigh)"
                )
            )
    v, w = lax_linalg.eigh(matrices(a, "eigh"), lower=bool(lower))
    return w if eigvals_only else (w, v)


def qr(
    a: Any, overwrite_a: bool = False, lwork: Any = None, mode: str = "full",
    pivoting: bool = False, check_finite: bool = True,
) -> tuple[Any, ...]:  # fmt: skip
    """QR decomposition ``a = q @ r`` (``jax.scipy.linalg.qr``).

    Args:
        a: ``(..., m, n)`` array.
        mode: 'full' (``q`` ``(..., m, m)``, ``r`` ``(..., m, n)``), 'economic' (``k = min(m,
            n)`` columns of ``q`` and rows of ``r``) or 'r' (only ``r``, full).
        pivoting: column pivoting, rank-revealing (LAPACK's ``?geqp3``: each Householder step
            takes the remaining column of largest norm; see :func:`blu.lax.linalg.qr`):
            ``a[..., :, p] = q @ r`` with ``|r[..., i, i]|`` non-increasing.

    Returns:
        ``(q, r)``, or the 1-tuple ``(r,)`` for mode 'r' (as SciPy and JAX); with ``pivoting``,
        ``(q, r, p)`` or ``(r, p)``, ``p`` ``(..., n)`` int32 column indices. Signs follow
        LAPACK. The derivative needs 'economic' or ``m <= n`` (with ``pivoting``, ``p`` held
        fixed, as JAX).

    Raises:
        BluValueError: another mode ('raw' too).
        BluShapeError: fewer than two dimensions.
    """
    del overwrite_a, lwork, check_finite
    if mode not in ("full", "r", "economic"):
        raise BluValueError(
            with_user_line(f"scipy.linalg.qr: mode must be 'full', 'economic' or 'r', got {mode!r}")
        )
    a = matrices(a, "qr", square=False)
    if pivoting:
        q, r, p = lax_linalg.qr(a, pivoting=True, full_matrices=mode != "economic")
        return (r, p) if mode == "r" else (q, r, p)
    q, r = lax_linalg.qr(a, full_matrices=mode != "economic")
    return (r,) if mode == "r" else (q, r)


def qr_multiply(
    a: Any, c: Any, mode: str = "right", pivoting: bool = False, conjugate: bool = False,
    overwrite_a: bool = False, overwrite_c: bool = False,
) -> tuple[Any, ...]:  # fmt: skip
    """``Q @ c`` or ``c @ Q`` with ``a = Q R`` (``a[..., :, p] = Q R`` with ``pivoting``)
    (``jax.scipy.linalg.qr_multiply``).

    Args:
        a: ``(..., m, n)``; ``k = min(m, n)``.
        c: mode 'right': ``(..., p, m)`` (a vector ``(m,)`` is one row); mode 'left': ``(...,
            k, p)`` (a vector ``(k,)`` is one column). Batch dimensions broadcast with ``a``'s;
            both are promoted to one float dtype.
        mode: 'right' (``c @ Q``, ``(..., p, k)``) or 'left' (``Q @ c``, ``(..., m, p)``).
        conjugate: use ``conj(Q)`` instead of ``Q``.
        pivoting: the column-pivoted QR ``a[..., :, p] = Q R`` (as :func:`qr`).

    Returns:
        ``(cQ, r)``, ``r`` ``(..., k, n)`` upper triangular (LAPACK's signs); a vector ``c``
        gives a vector ``cQ``. With ``pivoting``, ``(cQ, r, p)``, ``p`` ``(..., n)`` int32.

    Raises:
        BluValueError: another mode. BluShapeError: the shapes do not fit.
    """
    del overwrite_a, overwrite_c
    if mode not in ("right", "left"):
        raise BluValueError(
            with_user_line(
                f"scipy.linalg.qr_multiply: mode must be 'right' or 'left', got {mode!r}"
            )
        )
    a = matrices(a, "qr_multiply", square=False)
    a, c = promote_inexact(a, asarray_operand(c))
    vector = len(shape(c)) == 1
    if vector:
        c = c[:, None] if mode == "left" else c[None, :]
    m, n = shape(a)[-2:]
    k = min(m, n)
    fits = len(shape(c)) >= 2 and (shape(c)[-2] == k if mode == "left" else shape(c)[-1] == m)
    if not fits:
        want = f"(..., {k}, p)" if mode == "left" else f"(..., p, {m})"
        raise BluShapeError(
            with_user_line(
                f"scipy.linalg.qr_multiply: a {get_aval(a).str_short()} needs c {want} for "
                f"mode={mode!r}, got {get_aval(c).str_short()}"
            )
        )
    # Q's first k columns are all either mode uses
    q, r, *p = lax_linalg.qr(a, pivoting=bool(pivoting), full_matrices=False)
    if conjugate:
        q = conj(q)
    out = matmul(q, c) if mode == "left" else matmul(c, q)
    batch = shape(out)[:-2]  # a's batch broadcast with c's
    r = broadcast_to(r, batch + shape(r)[-2:])
    out = out.reshape(-1) if vector else out
    return (out, r, broadcast_to(p[0], batch + shape(p[0])[-1:])) if pivoting else (out, r)


def svd(
    a: Any, full_matrices: bool = True, compute_uv: bool = True, overwrite_a: bool = False,
    check_finite: bool = True, lapack_driver: str = "gesdd",
) -> Any:  # fmt: skip
    """Singular value decomposition ``a = u @ diag(s) @ vh`` (``jax.scipy.linalg.svd``).

    Args:
        a: ``(..., m, n)`` array.
        full_matrices: ``u`` ``(..., m, m)`` and ``vh`` ``(..., n, n)``; else ``k = min(m, n)``
            vectors each.
        compute_uv: else return only ``s``.
        lapack_driver: accepted ('gesdd' or 'gesvd'); the one SVD kernel is used either way.

    Returns:
        ``(u, s, vh)`` with ``s`` ``(..., k)`` descending, or ``s``. Derivatives as
        :func:`blu.numpy.linalg.svd`'s.

    Raises:
        BluValueError: an unknown ``lapack_driver``. BluShapeError: fewer than two dimensions.
    """
    del overwrite_a, check_finite
    if lapack_driver not in ("gesdd", "gesvd"):
        raise BluValueError(
            with_user_line(
                f"scipy.linalg.svd: lapack_driver must be 'gesdd' or 'gesvd', got {lapack_driver!r}"
            )
        )
    x = matrices(a, "svd", square=False)
    if not compute_uv:
        return lax_linalg.svd(x, compute_uv=False)
    return tuple(lax_linalg.svd(x, full_matrices=bool(full_matrices)))


def polar(
    a: Any, side: str = "right", *, method: str = "qdwh", eps: Any = None,
    max_iterations: Any = None,
) -> tuple[Any, Any]:  # fmt: skip
    """Polar decomposition (``jax.scipy.linalg.polar``): ``a = u @ p`` (side 'right') or
    ``a = p @ u`` ('left'), ``u`` with orthonormal columns (rows if ``m < n``) and ``p``
    Hermitian positive semi-definite.

    Args:
        a: ``(..., m, n)`` array (JAX's takes one matrix; leading axes here are batch axes).
        side: 'right' or 'left'.
        method: 'qdwh' (JAX's default, its QR-based iteration) or 'svd'. Both are computed
            from the SVD here (``u = U Vh``, ``p = V S Vh`` or ``U S U^H``), so ``eps`` and
            ``max_iterations`` (QDWH's) are accepted and unused; the results agree with
            JAX's to rounding.

    Returns:
        ``(u, p)``: ``u`` ``(..., m, n)``, ``p`` ``(..., n, n)`` (right) or ``(..., m, m)``
        (left). Differentiable where the singular values are distinct and nonzero.

    Raises:
        BluValueError: another side or method. BluShapeError: fewer than two dimensions.
    """
    del eps, max_iterations
    if side not in ("right", "left"):
        raise BluValueError(
            with_user_line(f"scipy.linalg.polar: side must be 'right' or 'left', got {side!r}")
        )
    if method not in ("qdwh", "svd"):
        raise BluValueError(
            with_user_line(f"scipy.linalg.polar: method must be 'qdwh' or 'svd', got {method!r}")
        )
    x = matrices(a, "polar", square=False)
    u, s, vh = lax_linalg.svd(x, full_matrices=False)
    s = s.astype(dtype(x))
    unitary = matmul(u, vh)
    if side == "right":
        posdef = matmul(mH(vh) * s[..., None, :], vh)
    else:
        posdef = matmul(u * s[..., None, :], mH(u))
    return unitary, posdef
