"""Samplers built from the others as ``jax.random`` builds them: ``chisquare``, ``f`` and ``t``
from gammas and normals, ``maxwell`` and ``double_sided_maxwell`` from normals,
``generalized_normal`` and ``ball`` from gammas and exponentials, ``triangular`` and ``wald``
from uniforms and normals, and ``orthogonal`` from the QR decomposition of normals, with
``jax.random``'s signatures, shapes and dtypes.

They are correct in distribution (tested against scipy.stats) but do not reproduce
``jax.random``'s bits, since blu's ``gamma`` does not. Parameters broadcast to ``shape`` as
JAX's ``_check_shape`` requires: each parameter's shape must broadcast *to* ``shape`` (the
broadcast of ``shape`` with the parameters' shapes is ``shape`` itself), else
``BluShapeError``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from blu import lax
from blu import numpy as bnp
from blu.core import dtypes
from blu.core.errors import BluShapeError, BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.random.distributions import exponential, loggamma
from blu.random.more import rademacher
from blu.random.prng import (
    _as_array,
    _check_key,
    _param_shape,
    _params,
    _shape_arg,
    split,
)
from blu.random.samplers import _float_dtype, _prologue, normal, uniform

__all__ = [
    "ball",
    "chisquare",
    "double_sided_maxwell",
    "f",
    "generalized_normal",
    "maxwell",
    "orthogonal",
    "t",
    "triangular",
    "wald",
]


def _log_chisquare(key: Any, df: Any, shape: tuple[int, ...], dtype: np.dtype) -> Any:
    """``log`` of chi-square(df) draws: ``log 2 + loggamma(df / 2)`` (``df`` of ``shape``)."""
    half = lax.div(df, lax.full(shape, 2.0, dtype))
    return lax.add(loggamma(key, half, shape, dtype), lax.full(shape, np.log(2.0), dtype))


def chisquare(
    key: Any, df: Any, shape: Sequence[int] | None = None, dtype: Any = dtypes.float32
) -> Any:
    """Chi-square draws with ``df`` degrees of freedom: ``2 * Gamma(df / 2)`` (JAX's, through
    ``loggamma`` so tiny ``df`` underflows only at the final ``exp``).

    Args:
        key: ``uint32[2]``.
        df: degrees of freedom > 0, broadcastable to ``shape``.
        shape: output shape (default ``df``'s shape).
        dtype: a float dtype.

    Returns:
        An array of ``shape`` and ``dtype``, values >= 0 (mean ``df``, variance ``2 df``).

    Raises:
        BluShapeError: ``df`` does not broadcast to ``shape``.
        BluTypeError: ``key`` is not a key, or ``dtype`` is not a float.
    """
    key, dtype, shape, (df,) = _prologue("chisquare", key, dtype, shape, df=df)
    return lax.exp(_log_chisquare(key, df, shape, dtype))


def f(
    key: Any,
    dfnum: Any,
    dfden: Any,
    shape: Sequence[int] | None = None,
    dtype: Any = dtypes.float32,
) -> Any:
    """F-distribution draws: ``(X1 / dfnum) / (X2 / dfden)`` for independent chi-squares
    ``X1 ~ chi2(dfnum)``, ``X2 ~ chi2(dfden)`` (JAX's; the ratio formed in log space).

    Args:
        key: ``uint32[2]``.
        dfnum, dfden: degrees of freedom > 0 of the numerator and denominator, broadcastable
            to ``shape``.
        shape: output shape (default: ``dfnum`` and ``dfden`` broadcast together).
        dtype: a float dtype.

    Returns:
        An array of ``shape`` and ``dtype``, values >= 0.

    Raises:
        BluShapeError: ``dfnum`` or ``dfden`` does not broadcast to ``shape`` (or, with no
            ``shape``, to each other).
        BluTypeError: ``key`` is not a key, or ``dtype`` is not a float.
    """
    key, dtype, shape, (dfn, dfd) = _prologue("f", key, dtype, shape, dfnum=dfnum, dfden=dfden)
    k_den, k_num = split(key)
    log_num = lax.sub(_log_chisquare(k_num, dfn, shape, dtype), lax.log(dfn))
    log_den = lax.sub(_log_chisquare(k_den, dfd, shape, dtype), lax.log(dfd))
    return lax.exp(lax.sub(log_num, log_den))


def t(key: Any, df: Any, shape: Sequence[int] | None = None, dtype: Any = dtypes.float32) -> Any:
    """Student's t draws with ``df`` degrees of freedom: ``Z sqrt(df / X)`` for independent
    ``Z ~ N(0, 1)`` and ``X ~ chi2(df)`` (JAX's ``n * sqrt(half_df / Gamma(half_df))``).

    Args:
        key: ``uint32[2]``.
        df: degrees of freedom > 0, broadcastable to ``shape``.
        shape: output shape (default ``df``'s shape, as JAX's ``shape=None``).
        dtype: a float dtype.

    Returns:
        An array of ``shape`` and ``dtype``.

    Raises:
        BluShapeError: ``df`` does not broadcast to ``shape``.
        BluTypeError: ``key`` is not a key, or ``dtype`` is not a float.
    """
    key, dtype, shape, (df,) = _prologue("t", key, dtype, shape, df=df)
    k_n, k_g = split(key)
    z = normal(k_n, shape, dtype)
    half = lax.div(df, lax.full(shape, 2.0, dtype))
    # sqrt(half / G) = exp((log half - log G) / 2): no inf where G underflows (tiny df)
    log_ratio = lax.sub(lax.log(half), loggamma(k_g, half, shape, dtype))
    return lax.mul(z, lax.exp(lax.mul(log_ratio, lax.full(shape, 0.5, dtype))))


def maxwell(key: Any, shape: Sequence[int] = (), dtype: Any = dtypes.float32) -> Any:
    """Maxwell (-Boltzmann) draws, the length of a standard normal 3-vector (JAX's): density
    ``sqrt(2 / pi) x^2 exp(-x^2 / 2)`` on ``x >= 0``, mean ``2 sqrt(2 / pi)``.

    Args:
        key: ``uint32[2]``.
        shape: output shape.
        dtype: a float dtype.

    Returns:
        An array of ``shape`` and ``dtype``, values >= 0.

    Raises:
        BluTypeError: ``key`` is not a key, or ``dtype`` is not a float.
    """
    key, dtype, shape, _ = _prologue("maxwell", key, dtype, shape)
    z = normal(key, shape + (3,), dtype)
    return lax.sqrt(lax.reduce_sum(lax.mul(z, z), (len(shape),)))


def double_sided_maxwell(
    key: Any, loc: Any, scale: Any, shape: Sequence[int] = (), dtype: Any = dtypes.float32
) -> Any:
    """Double-sided Maxwell draws ``loc + scale * s * M``: ``M`` Maxwell, ``s`` a random sign
    (JAX's), density ``sqrt(2 / pi) y^2 exp(-y^2 / 2) / (2 scale)`` of ``y = (x - loc) / scale``.

    As JAX, ``shape`` is the batch of draws in front of the parameters' shape: the result has
    shape ``shape + broadcast(loc, scale)`` (JAX appends that shape to a ``shape`` of ``()``
    twice; blu once).

    Args:
        key: ``uint32[2]``.
        loc, scale: location and scale > 0 (broadcast together).
        shape: the batch shape of the draws.
        dtype: a float dtype.

    Returns:
        An array of shape ``shape + broadcast(loc, scale)`` and ``dtype``.

    Raises:
        BluShapeError: ``loc`` and ``scale`` do not broadcast together.
        BluTypeError: ``key`` is not a key, or ``dtype`` is not a float.
    """
    dtype = _float_dtype(dtype, "double_sided_maxwell")
    key = _check_key(key, "double_sided_maxwell")
    params = _param_shape(
        "double_sided_maxwell",
        loc=lax.convert_element_type(_as_array(loc, dtype), dtype),
        scale=lax.convert_element_type(_as_array(scale, dtype), dtype),
    )
    shape = _shape_arg(shape, "double_sided_maxwell") + params
    shape, (loc, scale) = _params("double_sided_maxwell", dtype, shape, loc=loc, scale=scale)
    k_m, k_s = split(key)
    y = lax.mul(rademacher(k_s, shape, dtype), maxwell(k_m, shape, dtype))
    return lax.add(lax.mul(y, scale), loc)


def generalized_normal(
    key: Any, p: Any, shape: Sequence[int] | None = (), dtype: Any = dtypes.float32
) -> Any:
    """Generalized normal draws of power ``p``, density ``p exp(-|x|^p) / (2 Gamma(1/p))``
    (``p = 1`` Laplace, ``p = 2`` normal with variance 1/2): ``s G^(1/p)`` with
    ``G ~ Gamma(1/p)`` and ``s`` a random sign (JAX's; the power taken from ``loggamma``).

    Args:
        key: ``uint32[2]``.
        p: the power > 0, broadcastable to ``shape``.
        shape: output shape (JAX's default ``()``; ``None`` for ``p``'s shape).
        dtype: a float dtype.

    Returns:
        An array of ``shape`` and ``dtype``.

    Raises:
        BluShapeError: ``p`` does not broadcast to ``shape``.
        BluTypeError: ``key`` is not a key, or ``dtype`` is not a float.
    """
    key, dtype, shape, (p,) = _prologue("generalized_normal", key, dtype, shape, p=p)
    return _generalized_normal(key, p, shape, dtype)


def _generalized_normal(key: Any, p: Any, shape: tuple[int, ...], dtype: np.dtype) -> Any:
    k_g, k_s = split(key)
    inv_p = lax.div(lax.full(shape, 1.0, dtype), p)
    mag = lax.exp(lax.mul(loggamma(k_g, inv_p, shape, dtype), inv_p))
    return lax.mul(rademacher(k_s, shape, dtype), mag)


def _static_dim(x: Any, what: str, name: str) -> int:
    if not dtypes.is_int_scalar(x):
        raise BluTypeError(
            with_user_line(f"random.{name}: {what} must be a static int dimension, got {x!r}")
        )
    if int(x) < 0:
        raise BluValueError(with_user_line(f"random.{name}: {what} must be >= 0, got {x}"))
    return int(x)


def ball(
    key: Any, d: int, p: float = 2, shape: Sequence[int] = (), dtype: Any = dtypes.float32
) -> Any:
    """Points uniform in the unit ``p``-norm ball of ``R^d``: ``g / (sum |g_i|^p + e)^(1/p)``
    for ``g`` of ``d`` generalized normals of power ``p`` and ``e`` standard exponential
    (Barthe, Guedon, Mendelson & Naor 2005, "A probabilistic approach to the geometry of the
    l_p^n-ball"; JAX's).

    Args:
        key: ``uint32[2]``.
        d: the dimension, a static int >= 0.
        p: the norm's power > 0 (a scalar).
        shape: the batch shape of the points.
        dtype: a float dtype.

    Returns:
        An array of shape ``shape + (d,)`` and ``dtype``, each point of ``p``-norm < 1.

    Raises:
        BluTypeError: ``d`` is not an int, ``key`` is not a key, or ``dtype`` is not a float.
        BluValueError: ``d`` is negative.
        BluShapeError: ``p`` is not a scalar.
    """
    dtype = _float_dtype(dtype, "ball")
    key = _check_key(key, "ball")
    d = _static_dim(d, "d", "ball")
    shape = _shape_arg(shape, "ball")
    full = shape + (d,)
    p_arr = lax.convert_element_type(_as_array(p, dtype), dtype)
    if get_aval(p_arr).shape != ():
        raise BluShapeError(
            with_user_line(f"random.ball: p must be a scalar, got {get_aval(p_arr).str_short()}")
        )
    k_g, k_e = split(key)
    g = _generalized_normal(k_g, lax.broadcast_in_dim(p_arr, full, ()), full, dtype)
    e = exponential(k_e, shape, dtype)
    pw = lax.exp(lax.mul(lax.log(lax.abs(g)), lax.broadcast_in_dim(p_arr, full, ())))
    total = lax.add(lax.reduce_sum(pw, (len(shape),)), e)
    inv_p = lax.div(lax.full(shape, 1.0, dtype), lax.broadcast_in_dim(p_arr, shape, ()))
    norm = lax.exp(lax.mul(lax.log(total), inv_p))
    return lax.div(g, lax.broadcast_in_dim(norm, full, tuple(range(len(shape)))))


def triangular(
    key: Any,
    left: Any,
    mode: Any,
    right: Any,
    shape: Sequence[int] | None = None,
    dtype: Any = dtypes.float32,
) -> Any:
    """Triangular draws on ``[left, right]`` peaking at ``mode``, by the inverse CDF of a
    uniform ``u`` (JAX's): ``left + sqrt(u (right - left) (mode - left))`` where
    ``u < (mode - left) / (right - left)``, else ``right - sqrt((1 - u) (right - left)
    (right - mode))``.

    Args:
        key: ``uint32[2]``.
        left, mode, right: ``left <= mode <= right``, ``left < right``, broadcastable to
            ``shape``.
        shape: output shape (default: the three broadcast together).
        dtype: a float dtype.

    Returns:
        An array of ``shape`` and ``dtype``.

    Raises:
        BluShapeError: a parameter does not broadcast to ``shape``.
        BluTypeError: ``key`` is not a key, or ``dtype`` is not a float.
    """
    key, dtype, shape, (lo, mo, hi) = _prologue(
        "triangular", key, dtype, shape, left=left, mode=mode, right=right
    )
    width = lax.sub(hi, lo)
    u = uniform(key, shape, dtype)
    below = lax.lt(u, lax.div(lax.sub(mo, lo), width))
    a = lax.add(lo, lax.sqrt(lax.mul(lax.mul(u, width), lax.sub(mo, lo))))
    one_minus = lax.sub(lax.full(shape, 1.0, dtype), u)
    b = lax.sub(hi, lax.sqrt(lax.mul(lax.mul(one_minus, width), lax.sub(hi, mo))))
    return lax.select(below, a, b)


def wald(
    key: Any, mean: Any, shape: Sequence[int] | None = None, dtype: Any = dtypes.float32
) -> Any:
    """Wald (inverse Gaussian) draws of mean ``mean`` and shape parameter 1: density
    ``exp(-(x - mean)^2 / (2 mean^2 x)) / sqrt(2 pi x^3)`` (scipy's ``invgauss(mean)``).

    Michael, Schucany & Haas 1976, "Generating random variates using transformations with
    multiple roots" (JAX's method): with ``w = mean y``, ``y`` the square of a standard
    normal, the smaller root ``x = mean - mean (sqrt(4 w + w^2) - w) / 2``, computed as
    ``4 mean / (sqrt(4 + w) + sqrt(w))^2`` (no cancellation for large ``w``), is kept with
    probability ``mean / (mean + x)``, else ``mean^2 / x``.

    Args:
        key: ``uint32[2]``.
        mean: means > 0, broadcastable to ``shape``.
        shape: output shape (default ``mean``'s shape).
        dtype: a float dtype.

    Returns:
        An array of ``shape`` and ``dtype``, values > 0.

    Raises:
        BluShapeError: ``mean`` does not broadcast to ``shape``.
        BluTypeError: ``key`` is not a key, or ``dtype`` is not a float.
    """
    key, dtype, shape, (mu,) = _prologue("wald", key, dtype, shape, mean=mean)
    k_n, k_u = split(key)
    v = normal(k_n, shape, dtype)
    w = lax.mul(mu, lax.mul(v, v))
    root = lax.add(lax.sqrt(lax.add(w, lax.full(shape, 4.0, dtype))), lax.sqrt(w))
    x = lax.div(lax.mul(lax.full(shape, 4.0, dtype), mu), lax.mul(root, root))
    keep = lax.le(uniform(k_u, shape, dtype), lax.div(mu, lax.add(mu, x)))
    return lax.select(keep, x, lax.div(lax.mul(mu, mu), x))


def orthogonal(
    key: Any, n: int, shape: Sequence[int] = (), dtype: Any = dtypes.float32, m: int | None = None
) -> Any:
    """Haar-distributed (uniformly random) orthogonal matrices, or ``n x m`` matrices with
    orthonormal columns (``n >= m``) or rows (``n < m``).

    The QR decomposition of a standard normal matrix, ``Q``'s columns multiplied by the signs
    of ``R``'s diagonal (Mezzadri 2007, "How to generate random matrices from the classical
    compact groups"; JAX's): without that correction ``Q`` is not Haar.

    Args:
        key: ``uint32[2]``.
        n: rows, a static int >= 0.
        shape: the batch shape of the matrices.
        dtype: a float dtype.
        m: columns (default ``n``: square orthogonal matrices).

    Returns:
        An array of shape ``shape + (n, m)`` and ``dtype``.

    Raises:
        BluTypeError: ``n`` or ``m`` is not an int, ``key`` is not a key, or ``dtype`` is not
            a float.
        BluValueError: ``n`` or ``m`` is negative.
    """
    dtype = _float_dtype(dtype, "orthogonal")
    key = _check_key(key, "orthogonal")
    n = _static_dim(n, "n", "orthogonal")
    m = n if m is None else _static_dim(m, "m", "orthogonal")
    shape = _shape_arg(shape, "orthogonal")
    tall, wide = max(n, m), min(n, m)
    if wide == 0:
        return lax.full(shape + (n, m), 0.0, dtype)
    z = normal(key, shape + (tall, wide), dtype)
    q, r = bnp.linalg.qr(z)
    d = bnp.diagonal(r, axis1=-2, axis2=-1)
    q = q * bnp.expand_dims(lax.sign(d), -2)
    return bnp.swapaxes(q, -1, -2) if n < m else q
