"""Norms and condition numbers: norm, vector_norm, matrix_norm, cond.

Euclidean, Frobenius and p-norms have a gradient that is finite at zero: the square (or p-th)
root is taken of ``where(s == 0, 1, s)`` and replaced by 0 there, so ``grad(norm)(0) == 0``
(a subgradient) instead of NaN. The spectral and nuclear norms differentiate through the
singular values only (defined even when they repeat).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from blu.core.errors import BluValueError, LinAlgError, with_user_line
from blu.core.interpreter import get_aval
from blu.lax import linalg as lax_linalg
from blu.numpy._promote import asarray_operand, canonicalize_axes, to_inexact
from blu.numpy.linalg._util import abs2, matrices
from blu.numpy.linalg.solvers import inv
from blu.numpy.logic import equal, logical_and, logical_not, not_equal
from blu.numpy.manipulation import expand_dims, moveaxis, squeeze
from blu.numpy.reductions import any as _any
from blu.numpy.reductions import max as _max
from blu.numpy.reductions import min as _min
from blu.numpy.reductions import sum as _sum
from blu.numpy.selection import where
from blu.numpy.transcendental import sqrt
from blu.numpy.ufuncs import abs as _abs
from blu.numpy.ufuncs import isnan, power


def _root_safe_at_zero(s: Any, p: float) -> Any:
    """``s ** (1 / p)`` for ``s >= 0`` whose derivative at ``s == 0`` is 0, not inf/NaN."""
    zero = equal(s, 0)
    safe = where(zero, 1.0, s)
    root = sqrt(safe) if p == 2 else power(safe, 1.0 / p)
    return where(zero, 0.0, root)


def _max0(a: Any, axis: Any, keepdims: bool) -> Any:
    """``max`` of nonnegative ``a`` whose empty reduction is 0 (JAX's ``initial=0``: a norm
    of nothing), the ``initial`` left out otherwise (no tie with 0 in the gradient)."""
    shape = get_aval(a).shape
    axes = canonicalize_axes(axis, len(shape), "norm")
    empty = any(shape[i] == 0 for i in axes)
    return _max(a, axis=axis, keepdims=keepdims, initial=0 if empty else None)


def _vector_norm(x: Any, ord: Any, axes: tuple[int, ...], keepdims: bool) -> Any:
    if ord is None or ord == 2:
        return _root_safe_at_zero(_sum(abs2(x), axis=axes, keepdims=keepdims), 2)
    if isinstance(ord, str):
        raise BluValueError(with_user_line(f"linalg.norm: invalid ord {ord!r} for vectors"))
    a = _abs(x)
    if ord == np.inf:
        return _max0(a, axes, keepdims)
    if ord == -np.inf:
        return _min(a, axis=axes, keepdims=keepdims)
    if ord == 0:  # the number of nonzeros
        return _sum(not_equal(x, 0), axis=axes, keepdims=keepdims, dtype=a.dtype)
    if ord == 1:
        return _sum(a, axis=axes, keepdims=keepdims)
    p = float(ord)
    total = _sum(power(a, p), axis=axes, keepdims=keepdims)
    # a negative p: sum 0 (no entries) is inf, as numpy's and JAX's 0 ** (1 / p)
    return _root_safe_at_zero(total, p) if p > 0 else power(total, 1.0 / p)


def _matrix_norm(x: Any, ord: Any, axes: tuple[int, int], keepdims: bool) -> Any:
    r, c = axes
    if r == c:
        raise BluValueError(with_user_line(f"linalg.norm: duplicate axes {axes}"))
    if ord is None or ord == "fro":
        return _root_safe_at_zero(_sum(abs2(x), axis=axes, keepdims=keepdims), 2)
    if ord in ("nuc", 2, -2):
        s = lax_linalg.svd(moveaxis(x, (r, c), (-2, -1)), compute_uv=False)
        red = {"nuc": _sum, 2: _max0, -2: _min}[ord]
        out = red(s, axis=-1, keepdims=False)
        return expand_dims(out, sorted((r, c))) if keepdims else out
    a = _abs(x)
    if ord in (1, -1):  # column sums (over rows), then extremum over columns
        red = _max0 if ord == 1 else _min
        out = red(_sum(a, axis=r, keepdims=True), axis=c, keepdims=True)
    elif ord in (np.inf, -np.inf):  # row sums, then extremum over rows
        red = _max0 if ord == np.inf else _min
        out = red(_sum(a, axis=c, keepdims=True), axis=r, keepdims=True)
    else:
        raise BluValueError(with_user_line(f"linalg.norm: invalid ord {ord!r} for matrices"))
    return out if keepdims else squeeze(out, axes)


def norm(x: Any, ord: Any = None, axis: Any = None, keepdims: bool = False) -> Any:
    """Vector and matrix norms, as ``numpy.linalg.norm``.

    Vector norms (``axis`` an int, or ``x`` 1-D with ``axis`` None): ``ord`` None/2
    (Euclidean), 1, inf, -inf, 0 (number of nonzeros) or any other p
    (``sum(|x|^p)^(1/p)``). Matrix norms (``axis`` a pair, or ``x`` 2-D with ``axis`` None):
    None/'fro' (Frobenius), 'nuc' (sum of singular values), 2/-2 (largest/smallest singular
    value), 1/-1 (max/min column sum), inf/-inf (max/min row sum). With ``ord`` and ``axis``
    both None the result is the 2-norm of the raveled array, whatever its rank.

    The gradient is finite at ``x == 0`` (0 for the Euclidean/Frobenius/p-norms, p >= 1).
    Over no entries the norms that take a maximum (inf; 1, inf and 2 for matrices) are 0, as
    JAX's; those that take a minimum raise, as numpy's and JAX's.

    Raises:
        BluValueError: an invalid ``ord`` or ``axis``.
    """
    x = to_inexact(asarray_operand(x))
    nd = get_aval(x).ndim
    if axis is None and ord is None:
        axes = tuple(range(nd))
        return _root_safe_at_zero(_sum(abs2(x), axis=axes, keepdims=keepdims), 2)
    if axis is None:
        if nd not in (1, 2):
            raise BluValueError(
                with_user_line(f"linalg.norm: ord={ord!r} needs a 1-D or 2-D x or an axis")
            )
        axis = tuple(range(nd))
    axes = canonicalize_axes(axis, nd, "norm")
    if len(axes) == 1:
        return _vector_norm(x, ord, axes, keepdims)
    if len(axes) == 2:
        return _matrix_norm(x, ord, (axes[0], axes[1]), keepdims)
    raise BluValueError(with_user_line(f"linalg.norm: axis must be an int or a pair, got {axis!r}"))


def vector_norm(x: Any, /, *, axis: Any = None, keepdims: bool = False, ord: Any = 2) -> Any:
    """Vector norm over ``axis`` (None: all axes; a tuple: those axes flattened), as
    ``numpy.linalg.vector_norm``; ``ord`` as for ``norm``'s vector norms."""
    x = to_inexact(asarray_operand(x))
    nd = get_aval(x).ndim
    axes = tuple(range(nd)) if axis is None else canonicalize_axes(axis, nd, "vector_norm")
    return _vector_norm(x, ord, axes, keepdims)


def matrix_norm(x: Any, /, *, keepdims: bool = False, ord: Any = "fro") -> Any:
    """Matrix norm over the last two axes, as ``numpy.linalg.matrix_norm``."""
    x = matrices(x, "matrix_norm")
    nd = get_aval(x).ndim
    return _matrix_norm(x, ord, (nd - 2, nd - 1), keepdims)


def cond(x: Any, p: Any = None) -> Any:
    """Condition numbers ``(...)`` of ``(..., m, n)`` matrices (``numpy.linalg.cond``): the
    ratio of the extreme singular values for ``p`` None/2/-2, else
    ``norm(x, p) * norm(inv(x), p)`` (square ``x``). For ``p`` other than None/2 a NaN
    that comes from singularity (``0 * inf``, ``0 / 0``) is reported as inf, where ``x``
    itself holds no NaN (JAX's rule; None/2 return the plain ratio, as JAX).

    Raises:
        LinAlgError: empty matrices (numpy's and JAX's: a condition number of nothing is not
            defined).
    """
    x = matrices(x, "cond")
    if 0 in get_aval(x).shape[-2:]:
        raise LinAlgError(
            with_user_line(
                f"linalg.cond: not defined on empty matrices, got {get_aval(x).str_short()}"
            )
        )
    if p is None or p == 2:
        s = lax_linalg.svd(x, compute_uv=False)
        return _max(s, axis=-1) / _min(s, axis=-1)
    if p == -2:
        s = lax_linalg.svd(x, compute_uv=False)
        r = _min(s, axis=-1) / _max(s, axis=-1)
    else:
        x = matrices(x, "cond", True)
        r = norm(x, p, axis=(-2, -1)) * norm(inv(x), p, axis=(-2, -1))
    singular = logical_and(isnan(r), logical_not(_any(isnan(x), axis=(-2, -1))))
    return where(singular, np.inf, r)
