"""LU decomposition with partial pivoting of rectangular ``(..., m, n)`` matrices for
``blu.scipy.linalg.lu`` and ``lu_factor`` (JAX's take them; blu's LU primitive is square-only).

The factorization is the square primitive's on ``a`` padded with zero columns (``m > n``) or
zero rows (``m < n``) to ``s = max(m, n)``: partial pivoting over the first ``k = min(m, n)``
columns sees the same candidates (a zero row never wins a pivot search, the first largest
magnitude being taken), so the leading ``k`` steps are ``a``'s own and the rest act on zeros.
The derivative is JAX's rule for rectangular LU (``jax.lax.linalg``'s ``_lu_jvp_rule``: ``L``
padded to ``(m, m)`` with the identity, ``U`` to ``(n, n)``), not the square primitive's, whose
padded ``U`` is singular."""

from __future__ import annotations

from typing import Any

from blu import lax
from blu.lax import linalg as lax_linalg
from blu.numpy.creation import eye, tril, triu
from blu.numpy.linalg._util import dtype, shape
from blu.numpy.products import matmul
from blu.numpy.selection import take_along_axis
from blu.transforms.custom_derivatives import custom_jvp


def _pad(x: Any, rows: int, cols: int) -> Any:
    """``x`` with ``rows`` zero rows and ``cols`` zero columns appended."""
    config = [(0, 0, 0)] * (len(shape(x)) - 2) + [(0, rows, 0), (0, cols, 0)]
    return lax.pad(x, 0, config)


def _factor(a: Any) -> tuple[Any, Any, Any]:
    m, n = shape(a)[-2:]
    s = max(m, n)
    lu_, piv, perm = lax_linalg.lu(_pad(a, s - m, s - n))
    k = min(m, n)
    return lu_[..., :m, :n], piv[..., :k], perm[..., :m]


_lu_rect = custom_jvp(_factor)


@_lu_rect.defjvp
def _lu_rect_jvp(primals, tangents):
    """``X = L^-1 P dA U^-1`` with ``L`` ``(m, m)`` and ``U`` ``(n, n)`` padded by identity
    blocks; ``d(lu) = L tril(X, -1) + triu(X) U`` (JAX's rule)."""
    (a,), (da,) = primals, tangents
    lu_, piv, perm = _lu_rect(a)
    m, n = shape(a)[-2:]
    k = min(m, n)
    t = dtype(a)
    x = take_along_axis(da, perm[..., :, None], axis=-2)  # P dA
    l_ = _pad(tril(lu_[..., :, :k], -1), 0, m - k) + eye(m, dtype=t)
    tail = (lax.iota("int32", n) >= k).astype(t)  # the identity block of U's padding
    u_ = _pad(triu(lu_[..., :k, :]), n - k, 0) + eye(n, dtype=t) * tail
    la = lax_linalg.triangular_solve(l_, x, left_side=True, lower=True, unit_diagonal=True)
    lau = lax_linalg.triangular_solve(u_, la, left_side=False, lower=False)
    dlu = matmul(l_, tril(lau, -1)) + matmul(triu(lau), u_)
    zero = (piv - piv, perm - perm)
    return (lu_, piv, perm), (dlu, *zero)


def lu_rect(a: Any) -> tuple[Any, Any, Any]:
    """``(lu, pivots, permutation)`` of non-square ``a`` ``(..., m, n)``: ``lu`` ``(..., m,
    n)`` with unit-lower ``L`` ``(m, k)`` below its diagonal and ``U`` ``(k, n)`` on and above,
    ``pivots`` ``(..., k)`` int32 (LAPACK's 0-based row swaps), ``permutation`` ``(..., m)``
    int32 with ``a[..., permutation, :] == L @ U``; ``k = min(m, n)``."""
    return tuple(_lu_rect(a))
