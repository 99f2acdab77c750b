"""The polynomial helpers of ``jax.numpy`` (``polyval``, ``polyadd``, ``polysub``, ``polymul``,
``polyder``, ``polyint``, ``polydiv``, ``polyfit``, ``poly``, ``roots``): coefficients are 1-d
arrays, highest power first, as NumPy's; dtypes and the static-shape choices are JAX's
(``polydiv`` keeps the remainder's length, ``roots`` strips leading zeros only when
``strip_zeros``)."""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from blu import lax
from blu.core import dtypes
from blu.core.errors import BluShapeError, BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import Tracer, get_aval
from blu.numpy._promote import (
    asarray_operand,
    asarray_operands,
    broadcast_shapes,
    concrete_value,
    promote_dtypes,
    to_inexact,
)
from blu.numpy.creation import arange, array, ones, zeros
from blu.numpy.linalg.general import eigvals
from blu.numpy.linalg.solvers import inv, lstsq
from blu.numpy.manipulation import concatenate, roll
from blu.numpy.products import dot, outer
from blu.numpy.reductions import all as _all
from blu.numpy.reductions import argmin, prod
from blu.numpy.repetition import tile
from blu.numpy.selection import where
from blu.numpy.signal import convolve
from blu.numpy.transcendental import sqrt
from blu.numpy.ufuncs import maximum

__all__ = [
    "poly",
    "polyadd",
    "polyder",
    "polydiv",
    "polyfit",
    "polyint",
    "polymul",
    "polysub",
    "polyval",
    "roots",
]


def _static_int(v: Any, name: str, what: str) -> int:
    if isinstance(v, Tracer):
        concrete_value(v, f"{name} ({what})")
    try:
        return operator.index(v)
    except TypeError:
        raise BluTypeError(with_user_line(f"{name}: {what} must be an int, got {v!r}")) from None


def _inexact(*args: Any) -> list[Any]:
    """The arguments in their promoted dtype, integers and bools as the default float (not
    broadcast)."""
    return [to_inexact(a) for a in promote_dtypes(*args)]


def _vec(p: Any, name: str, what: str = "p") -> Any:
    if get_aval(p).ndim != 1:
        raise BluShapeError(
            with_user_line(f"{name}: {what} must be 1-d, got shape {get_aval(p).shape}")
        )
    return p


def polyval(p: Any, x: Any, *, unroll: int = 16) -> Any:
    """The polynomial with coefficients ``p`` (highest power first) at ``x``: the sum of
    ``p[i] x^(n-1-i)``, by Horner's rule (``jax.numpy.polyval``): a ``lax.scan`` over the leading
    axis of ``p`` (unrolled ``unroll`` times), so ``p`` may carry trailing axes that broadcast
    with ``x``; an empty ``p`` gives zeros. In the promoted dtype of ``p`` and ``x``, integers
    kept (numpy's and JAX's: integer arithmetic, wrapping as numpy's)."""
    p, x = promote_dtypes(*asarray_operands(p, x))
    if get_aval(p).ndim == 0:
        raise BluShapeError(with_user_line("polyval: p must have at least one dimension"))
    shape = broadcast_shapes(get_aval(p).shape[1:], get_aval(x).shape)
    y = lax.full(shape, 0, get_aval(x).dtype)
    y, _ = lax.scan(lambda y, c: (y * x + c, None), y, p, unroll=unroll)
    return y


def polyadd(a1: Any, a2: Any) -> Any:
    """The sum of two polynomials: the shorter one added to the end of the longer
    (``numpy.polyadd``; the promoted dtype, integers kept)."""
    a1, a2 = (_vec(a, "polyadd", w) for a, w in zip(promote_dtypes(a1, a2), ("a1", "a2")))
    n1, n2 = get_aval(a1).shape[0], get_aval(a2).shape[0]
    if n2 > n1:
        a1, a2, n1, n2 = a2, a1, n2, n1
    if n2 == 0:
        return a1
    return a1.at[n1 - n2 :].add(a2)


def polysub(a1: Any, a2: Any) -> Any:
    """The difference ``a1 - a2`` of two polynomials (``numpy.polysub``)."""
    a1, a2 = promote_dtypes(a1, a2)
    return polyadd(a1, -a2)


def _trim_front(a: Any, name: str, tol: float = 0.0) -> Any:
    v = concrete_value(a, f"{name} (trim_leading_zeros: the result's length depends on values)")
    nz = np.nonzero(np.abs(v) > tol)[0]
    return a[int(nz[0]) :] if nz.size else a[:0]


def polymul(a1: Any, a2: Any, *, trim_leading_zeros: bool = False) -> Any:
    """The product of two polynomials, their full convolution (``jax.numpy.polymul``; an empty
    input counts as ``[0]``). ``trim_leading_zeros`` (concrete inputs only) drops the leading
    zeros first, as NumPy's ``poly1d``."""
    a1, a2 = (_vec(a, "polymul", w) for a, w in zip(_inexact(a1, a2), ("a1", "a2")))
    if trim_leading_zeros and (get_aval(a1).shape[0] > 1 or get_aval(a2).shape[0] > 1):
        a1, a2 = _trim_front(a1, "polymul"), _trim_front(a2, "polymul")
    dt = get_aval(a1).dtype
    a1 = a1 if get_aval(a1).shape[0] else zeros((1,), dt)
    a2 = a2 if get_aval(a2).shape[0] else zeros((1,), dt)
    return convolve(a1, a2, mode="full")


def polyder(p: Any, m: int = 1) -> Any:
    """The ``m``-th derivative of a polynomial (``jax.numpy.polyder``; ``m`` static; the
    result has ``max(len(p) - m, 0)`` coefficients).

    Raises:
        BluValueError: a negative ``m``. BluShapeError: ``p`` is not 1-d.
    """
    m = _static_int(m, "polyder", "m")
    (p,) = _inexact(asarray_operand(p))
    p = _vec(p, "polyder")
    if m < 0:
        raise BluValueError(with_user_line(f"polyder: the order m must be >= 0, got {m}"))
    if m == 0:
        return p
    n = get_aval(p).shape[0]
    dt = get_aval(p).dtype
    if n <= m:
        return p[:0]
    grid = arange(m, n, dtype=dt)[None] - arange(m, dtype=dt)[:, None]
    return p[:-m] * prod(grid, axis=0)[::-1]


def polyint(p: Any, m: int = 1, k: Any = None) -> Any:
    """The ``m``-th antiderivative of a polynomial, the integration constants ``k`` (a scalar
    or ``m`` values, lowest order first as NumPy's) appended (``jax.numpy.polyint``).

    Raises:
        BluValueError: a negative ``m``, or ``k`` of neither 1 nor ``m`` values.
    """
    m = _static_int(m, "polyint", "m")
    p, k = _inexact(p, 0 if k is None else k)
    p = _vec(p, "polyint")
    if m < 0:
        raise BluValueError(with_user_line(f"polyint: the order m must be >= 0, got {m}"))
    if m == 0:
        return p
    k = tile(k.reshape(-1), m) if get_aval(k).size == 1 else k
    if get_aval(k).shape != (m,):
        raise BluValueError(
            with_user_line(
                f"polyint: k must be a scalar or {m} values, got shape {get_aval(k).shape}"
            )
        )
    dt = get_aval(p).dtype
    grid = arange(get_aval(p).shape[0] + m, dtype=dt)[None] - arange(m, dtype=dt)[:, None]
    coeff = prod(maximum(grid, 1), axis=0)[::-1]
    return concatenate([p, k]) / coeff


def polydiv(u: Any, v: Any, *, trim_leading_zeros: bool = False) -> Any:
    """Polynomial division ``u = q v + r`` (``jax.numpy.polydiv``): ``q`` has
    ``max(len(u) - len(v) + 1, 1)`` coefficients and ``r`` keeps ``len(u)`` (its leading ones
    zero; ``trim_leading_zeros``, concrete inputs only, drops those below ``sqrt(eps)`` as
    NumPy does).

    Raises:
        BluValueError: an empty ``v``.
    """
    u, v = (_vec(a, "polydiv", w) for a, w in zip(_inexact(u, v), ("u", "v")))
    m, n = get_aval(u).shape[0] - 1, get_aval(v).shape[0] - 1
    if n < 0:
        raise BluValueError(with_user_line("polydiv: the divisor v must not be empty"))
    dt = get_aval(u).dtype
    scale = 1.0 / v[0]
    q = zeros((max(m - n + 1, 1),), dt)
    r = u
    for k in range(m - n + 1):
        d = scale * r[k]
        q = q.at[k].set(d)
        r = r.at[k : k + n + 1].add(-d * v)
    if trim_leading_zeros:
        r = _trim_front(r, "polydiv", float(np.sqrt(dtypes.finfo(dt).eps)))
    return q, r


def polyfit(
    x: Any,
    y: Any,
    deg: int,
    rcond: float | None = None,
    full: bool = False,
    w: Any = None,
    cov: bool | str = False,
) -> Any:
    """The least-squares polynomial fit of degree ``deg`` (``jax.numpy.polyfit``): ``lstsq`` of
    the column-scaled ``vander(x, deg + 1)`` (weighted by ``w``); ``y`` may be ``(N, K)`` for
    ``K`` fits. Differentiable in ``x``, ``y`` and ``w``.

    Returns:
        The coefficients ``(deg + 1,)`` or ``(deg + 1, K)``; with ``full`` also the residuals,
        rank, singular values and ``rcond``; with ``cov`` the coefficients' covariance
        (``"unscaled"``: not scaled by the residuals).

    Raises:
        BluValueError: a negative ``deg``, or too few points to scale the covariance.
        BluShapeError: ``x`` not 1-d or empty, ``y`` not 1-d/2-d, ``w`` not 1-d, or lengths
        that differ.
    """
    deg = _static_int(deg, "polyfit", "deg")
    x, y = _inexact(asarray_operand(x), asarray_operand(y))
    order = deg + 1
    if deg < 0:
        raise BluValueError(with_user_line(f"polyfit: deg must be >= 0, got {deg}"))
    sx, sy = get_aval(x).shape, get_aval(y).shape
    if len(sx) != 1 or sx[0] == 0:
        raise BluShapeError(with_user_line(f"polyfit: x must be 1-d and non-empty, got {sx}"))
    if len(sy) not in (1, 2) or sy[0] != sx[0]:
        raise BluShapeError(
            with_user_line(f"polyfit: y must be 1-d or 2-d of x's length {sx[0]}, got {sy}")
        )
    if rcond is None:
        rcond = sx[0] * float(dtypes.finfo(get_aval(x).dtype).eps)
    lhs, rhs = _vander(x, order), y
    if w is not None:
        (w,) = _inexact(asarray_operand(w))
        if get_aval(w).shape != (sx[0],):
            raise BluShapeError(
                with_user_line(f"polyfit: w must be 1-d of length {sx[0]}, got {get_aval(w).shape}")
            )
        lhs = lhs * w[:, None]
        rhs = rhs * (w[:, None] if len(sy) == 2 else w)
    scale = sqrt((lhs * lhs).sum(axis=0))
    lhs = lhs / scale[None, :]
    c, resids, rank, s = lstsq(lhs, rhs, rcond)
    c = (c.T / scale).T
    if full:
        return c, resids, rank, s, array(rcond, get_aval(x).dtype)
    if not cov:
        return c
    vbase = inv(dot(lhs.T, lhs)) / outer(scale, scale)
    if cov == "unscaled":
        fac = array(1.0, get_aval(vbase).dtype)
    else:
        if sx[0] <= order:
            raise BluValueError(
                with_user_line(
                    f"polyfit: {sx[0]} data points must exceed the order {order} to scale the "
                    "covariance matrix"
                )
            )
        fac = resids / (sx[0] - order)
        fac = fac[0] if len(sy) == 1 else fac
    return c, (vbase * fac if len(sy) == 1 else vbase[:, :, None] * fac)


def _vander(x: Any, n: int) -> Any:
    cols = [x[:, None] ** float(k) if k else ones((get_aval(x).shape[0], 1), get_aval(x).dtype)
            for k in range(n - 1, -1, -1)]  # fmt: skip
    return concatenate(cols, axis=1)


def poly(seq_of_zeros: Any) -> Any:
    """The coefficients of the monic polynomial with the given roots (``jax.numpy.poly``); a
    non-empty square matrix gives its characteristic polynomial (from its eigenvalues:
    complex, as JAX's); no roots give ``1``.

    Raises:
        BluShapeError: neither 1-d nor a non-empty square matrix.
    """
    (z,) = _inexact(asarray_operand(seq_of_zeros))
    sh = get_aval(z).shape
    if len(sh) == 0:
        z = z.reshape(1)
    elif len(sh) == 2 and sh[0] == sh[1] and sh[0] != 0:
        z = eigvals(z)
    if get_aval(z).ndim != 1:
        raise BluShapeError(
            with_user_line(f"poly: input must be 1-d or a non-empty square matrix, got {sh}")
        )
    dt = get_aval(z).dtype
    if get_aval(z).shape[0] == 0:
        return ones((), dt)
    a = ones((1,), dt)
    for k in range(get_aval(z).shape[0]):
        a = convolve(a, concatenate([ones((1,), dt), -z[k : k + 1]]), mode="full")
    return a


def roots(p: Any, *, strip_zeros: bool = True) -> Any:
    """The roots of a polynomial, the eigenvalues of its companion matrix (``jax.numpy.roots``;
    complex). ``strip_zeros`` (concrete ``p`` only) drops the leading zeros, as NumPy; without
    it the result keeps ``len(p) - 1`` entries, NaN for each leading zero. Trailing zeros give
    zero roots.

    Raises:
        BluShapeError: ``p`` not 1-d.
    """
    (p,) = _inexact(asarray_operand(p))
    if get_aval(p).ndim == 0:
        p = p.reshape(1)
    p = _vec(p, "roots")
    cdt = np.result_type(get_aval(p).dtype, np.complex64)
    if strip_zeros:
        p = _trim_front(p, "roots (strip_zeros)")
    n = get_aval(p).shape[0]
    if n < 2:
        return zeros((0,), cdt)
    if strip_zeros:
        return _companion_eigvals(p)
    is0 = p == 0
    lead = where(_all(is0), n, argmin(is0))
    p = where(lead == n, 1.0, p)
    r = _companion_eigvals(roll(p, -lead))
    r = lax.sort((r == 0, r), num_keys=1)[1]  # zero roots (of the rolled-in zeros) last
    return where(arange(n - 1) < n - 1 - lead, r, complex(np.nan, np.nan))


def _companion_eigvals(p: Any) -> Any:
    n = get_aval(p).shape[0]
    dt = get_aval(p).dtype
    a = zeros((n - 1, n - 1), dt)
    if n > 2:
        a = a.at[arange(1, n - 1), arange(n - 2)].set(1.0)
    a = a.at[0, :].set(-p[1:] / p[0])
    return eigvals(a)
