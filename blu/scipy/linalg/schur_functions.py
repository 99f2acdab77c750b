"""Functions of ``jax.scipy.linalg`` computed from a complex Schur form (``schur``): the
matrix square root ``sqrtm`` (Björck & Hammarling 1983), a general matrix function ``funm``
(Parlett's recurrence, Golub & Van Loan, "Matrix Computations", 3rd ed., Algorithm 11.1.1) and
the Sylvester equation ``solve_sylvester`` (Bartels & Stewart 1972). Each runs as a blu program
(``lax`` loops), batched over leading axes; ``solve_sylvester(method='eigen')`` diagonalizes by
``eig`` instead (LAPACK's ``geev`` on the host, as JAX's). Like JAX's, which reach LAPACK's
Schur decomposition, they have no derivative rule."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from blu import lax
from blu import numpy as bnp
from blu.core import dtypes
from blu.core.errors import BluShapeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.lax import linalg as lax_linalg
from blu.numpy.extras import vectorize
from blu.numpy.linalg._util import dtype, mH, promote_inexact, shape
from blu.scipy.linalg._checks import matrices
from blu.scipy.linalg.schur import rsf2csf, schur


def _superdiagonals(n: int, diag: Any, fill: Callable[[Any, Any], Any]) -> Any:
    """The upper triangular ``F`` ``(n, n)`` with diagonal ``diag``, filled one superdiagonal
    ``p = 1 .. n-1`` at a time by ``fill(F, p)`` (the values of diagonal ``p`` from those of
    the diagonals below it)."""
    r, c = bnp.arange(n)[:, None], bnp.arange(n)[None, :]
    F = bnp.where(r == c, diag[None, :], 0).astype(dtype(diag))

    def step(p: Any, F: Any) -> Any:
        return bnp.where(c - r == p, fill(F, p), F)

    return lax.fori_loop(1, n, step, F)


def _sqrtm_triu(T: Any) -> Any:
    """The upper triangular square root ``U`` of upper triangular ``T`` (Björck & Hammarling):
    ``U[i, j] = (T[i, j] - sum_{i<k<j} U[i, k] U[k, j]) / (U[i, i] + U[j, j])``; the sum is
    ``(U @ U)[i, j]`` while diagonal ``j - i`` is still zero. A zero numerator gives zero (a
    singular ``T``'s ``0 / 0``, as JAX's)."""
    n = shape(T)[-1]
    d = bnp.sqrt(bnp.diagonal(T))

    def fill(U: Any, p: Any) -> Any:
        s = T - U @ U
        return bnp.where(s == 0, 0, s / (d[:, None] + d[None, :]))

    return _superdiagonals(n, d, fill)


def _sqrtm(a: Any) -> Any:
    T, Z = schur(a, output="complex")
    return Z @ _sqrtm_triu(T) @ mH(Z)


def sqrtm(A: Any, blocksize: int = 1) -> Any:
    """Matrix square root ``X`` with ``X @ X = A`` (``jax.scipy.linalg.sqrtm``): the principal
    root by the complex Schur method (Björck & Hammarling, "A Schur method for the square root
    of a matrix", Linear Algebra Appl. 52, 1983), as JAX's.

    Args:
        A: ``(..., n, n)`` array; integers and bools are promoted to the default float.
        blocksize: 1 only (JAX's takes no other).

    Returns:
        ``(..., n, n)`` complex (complex64 from float32, complex128 from float64), as JAX's;
        for a real ``A`` with a real principal root the imaginary part is rounding.

    Raises:
        BluShapeError: ``A`` is not ``(..., n, n)``. BluValueError: ``blocksize`` other than 1.
    """
    if blocksize != 1:
        raise BluValueError(
            with_user_line(f"scipy.linalg.sqrtm: only blocksize=1 is supported, got {blocksize}")
        )
    a = matrices(A, "sqrtm")
    a = a.astype(dtypes.complex_dtype(dtype(a)))
    if shape(a)[-1] == 0:
        return a
    return vectorize(_sqrtm, signature="(n,n)->(n,n)")(a)


def _funm(T: Any, Z: Any, func: Callable[[Any], Any]) -> tuple[Any, Any]:
    """``(Z F Z^H, minden)`` for the complex Schur form ``T``: ``F = f(T)`` by Parlett's
    recurrence ``F[i, j] = (T[i, j] (F[j, j] - F[i, i]) + sum_{i<k<j} (T[i, k] F[k, j] -
    F[i, k] T[k, j])) / (T[j, j] - T[i, i])``, the numerator being ``(T F - F T)[i, j]`` while
    diagonal ``j - i`` of ``F`` is zero; an equal pair of eigenvalues leaves it undivided (as
    JAX's). ``minden`` is the smallest such denominator in magnitude, or ``|T[0, 0]|``."""
    n = shape(T)[-1]
    t = bnp.diagonal(T)
    f = bnp.asarray(func(t)).astype(dtype(T))
    den = t[None, :] - t[:, None]

    def fill(F: Any, p: Any) -> Any:
        s = T @ F - F @ T
        return bnp.where(den == 0, s, s / bnp.where(den == 0, 1, den))

    F = _superdiagonals(n, f, fill)
    upper = bnp.arange(n)[:, None] < bnp.arange(n)[None, :]
    minden = bnp.minimum(bnp.abs(t[0]), bnp.min(bnp.where(upper, bnp.abs(den), bnp.inf)))
    return Z @ F @ mH(Z), minden


def funm(A: Any, func: Callable[[Any], Any], disp: bool = True) -> Any:
    """A matrix function ``f(A)`` (``jax.scipy.linalg.funm``): ``A = Z T Z^H`` (the real Schur
    form made complex by ``rsf2csf``, as JAX's), ``f(A) = Z f(T) Z^H`` with ``f(T)`` by
    Parlett's recurrence from ``func`` of ``T``'s diagonal.

    Args:
        A: ``(..., n, n)`` array; integers and bools are promoted to the default float.
        func: a function of one complex array (``A``'s eigenvalues), elementwise, in blu.
        disp: return only ``f(A)``; else also an error estimate (SciPy's).

    Returns:
        ``(..., n, n)`` complex, or ``(F, err)`` with ``err`` ``(...)`` real (``inf`` for a
        non-finite ``F``). Parlett's recurrence divides by differences of eigenvalues, so it
        is inaccurate when they are close (SciPy's and JAX's too); equal ones are left
        undivided.

    Raises:
        BluShapeError: ``A`` is not ``(..., n, n)``.
    """
    a = matrices(A, "funm")
    n = shape(a)[-1]
    ctype = dtypes.complex_dtype(dtype(a))
    if n == 0:
        F = a.astype(ctype)
        rtype = dtypes.real_dtype(ctype)
        return F if disp else (F, bnp.full(shape(a)[:-2], dtypes.finfo(rtype).eps, rtype))
    T, Z = rsf2csf(*schur(a))
    F, minden = vectorize(lambda T, Z: _funm(T, Z, func), signature="(n,n),(n,n)->(n,n),()")(T, Z)
    if disp:
        return F
    tol = float(dtypes.finfo(dtypes.real_dtype(ctype)).eps)
    minden = bnp.where(minden == 0, tol, minden)
    strict = bnp.sum(bnp.abs(bnp.triu(T, 1)), axis=-2)
    err = bnp.minimum(1, bnp.maximum(tol, tol / minden * bnp.max(strict, axis=-1)))
    bad = bnp.any(~bnp.isfinite(F), axis=(-2, -1))
    return F, bnp.where(bad, bnp.inf, err).astype(dtypes.real_dtype(ctype))


def _sylvester(a: Any, b: Any, c: Any, tol: float) -> Any:
    """``X`` with ``a X + X b = c`` for one problem (Bartels-Stewart): ``a = U R U^H``, ``b = V
    S V^H`` (complex Schur), ``R Y + Y S = U^H c V`` column by column, ``(R + S[j, j]) y_j =
    f_j - sum_{k<j} y_k S[k, j]``, and ``X = U Y V^H``."""
    R, U = schur(a, output="complex")
    S, V = schur(b, output="complex")
    F = mH(U) @ c.astype(dtype(R)) @ V
    m, n = shape(c)
    eye = bnp.eye(m, dtype=dtype(R))
    col = bnp.arange(n)

    def step(j: Any, Y: Any) -> Any:
        s = lax.dynamic_slice(S, (0, j), (n, 1))  # Y is zero in columns >= j
        rhs = lax.dynamic_slice(F, (0, j), (m, 1)) - Y @ s
        y = lax_linalg.triangular_solve(
            R + lax.dynamic_slice(S, (j, j), (1, 1)) * eye, rhs, left_side=True, lower=False
        )
        return bnp.where(col[None, :] == j, y, Y)

    Y = lax.fori_loop(0, n, step, bnp.zeros((m, n), dtype(R)))
    X = U @ Y @ mH(V)
    if not dtypes.is_complex(dtype(c)):
        X = bnp.real(X)
    close = bnp.abs(bnp.diagonal(R)[:, None] + bnp.diagonal(S)[None, :]) < tol
    return bnp.where(bnp.any(close), bnp.nan, X)


def _sylvester_eigen(a: Any, b: Any, c: Any, tol: float) -> Any:
    """``X`` with ``a X + X b = c`` for one problem by diagonalizing (JAX's 'eigen'): ``a = U_a
    diag(r_a) U_a^-1``, ``b = U_b diag(r_b) U_b^-1`` (``eig``), ``Y = (U_a^-1 c U_b) / (r_a[i] +
    r_b[j])`` and ``X = U_a Y U_b^-1``."""
    ra, ua = bnp.linalg.eig(a)
    rb, ub = bnp.linalg.eig(b)
    w = ra[:, None] + rb[None, :]
    f = bnp.linalg.solve(ua, c.astype(dtype(ra)) @ ub)
    X = ua @ (f / w) @ bnp.linalg.inv(ub)
    X = (X if dtypes.is_complex(dtype(c)) else bnp.real(X)).astype(dtype(c))
    return bnp.where(bnp.any(bnp.abs(w) < tol), bnp.nan, X)


def solve_sylvester(A: Any, B: Any, C: Any, *, method: str = "schur", tol: float = 1e-8) -> Any:
    """Solve the Sylvester equation ``A X + X B = C`` (``jax.scipy.linalg.solve_sylvester``)
    by the Bartels-Stewart algorithm on complex Schur forms of ``A`` and ``B`` (Bartels &
    Stewart, "Solution of the matrix equation AX + XB = C", Comm. ACM 15(9), 1972), or by
    diagonalizing them.

    Args:
        A: ``(..., m, m)``; B: ``(..., n, n)``; C: ``(..., m, n)``; batch dimensions broadcast,
            all promoted to one float dtype.
        method: 'schur' (JAX's default: a blu program) or 'eigen' (JAX's: ``A`` and ``B``
            diagonalized by :func:`blu.numpy.linalg.eig`, LAPACK's ``geev`` on the host; fast,
            but inaccurate when an eigenvector matrix is ill-conditioned, and wrong for a
            matrix that is not diagonalizable).
        tol: when some ``|eig(A)_i + eig(B)_j| < tol`` (no unique solution) the result is NaN.

    Returns:
        ``X`` ``(..., m, n)``, real when ``C`` is real (as JAX's).

    Raises:
        BluShapeError: the shapes do not fit. BluValueError: another ``method``.
    """
    if method not in ("schur", "eigen"):
        raise BluValueError(
            with_user_line(
                f"scipy.linalg.solve_sylvester: method must be 'schur' or 'eigen', got {method!r}"
            )
        )
    a, b = matrices(A, "solve_sylvester"), matrices(B, "solve_sylvester")
    c = matrices(C, "solve_sylvester", square=False)
    a, b, c = promote_inexact(a, b, c)
    m, n = shape(c)[-2:]
    if shape(a)[-1] != m or shape(b)[-1] != n:
        raise BluShapeError(
            with_user_line(
                f"scipy.linalg.solve_sylvester: A {get_aval(a).str_short()}, B "
                f"{get_aval(b).str_short()} and C {get_aval(c).str_short()} need shapes "
                "(..., m, m), (..., n, n) and (..., m, n)"
            )
        )
    if m == 0 or n == 0:
        batch = bnp.broadcast_shapes(shape(a)[:-2], shape(b)[:-2], shape(c)[:-2])
        return bnp.broadcast_to(c, batch + (m, n))
    solve = _sylvester if method == "schur" else _sylvester_eigen
    return vectorize(
        lambda a, b, c: solve(a, b, c, float(tol)), signature="(m,m),(n,n),(m,n)->(m,n)"
    )(a, b, c)
