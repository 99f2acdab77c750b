"""Discrete samplers of ``jax.random``: ``geometric``, ``binomial`` and ``multinomial``, with
``jax.random``'s signatures, shapes and dtypes.

They are correct in distribution (tested against scipy.stats by chi-square tests) but do not
reproduce ``jax.random``'s bits. Parameters broadcast to ``shape`` as JAX's ``_check_shape``
requires (each parameter's shape must broadcast *to* ``shape``), else ``BluShapeError``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from blu import lax
from blu import numpy as bnp
from blu.core import dtypes
from blu.core.errors import BluShapeError, BluTypeError, with_user_line
from blu.core.interpreter import get_aval
from blu.random.prng import _as_array, _broadcast, _check_key, _shape_arg, split
from blu.random.samplers import _compute_dtype, _float_dtype, _open_unit, _prologue, uniform

__all__ = ["binomial", "geometric", "multinomial"]


def _int_dtype(dtype: Any, name: str) -> np.dtype:
    dtype = dtypes.canonicalize(dtype)
    if not dtypes.is_int(dtype):
        raise BluTypeError(with_user_line(f"random.{name}: dtype must be an integer, got {dtype}"))
    return dtype


def geometric(
    key: Any, p: Any, shape: Sequence[int] | None = None, dtype: Any = dtypes.int32
) -> Any:
    """Geometric draws: the number of Bernoulli(``p``) trials up to and including the first
    success, on ``{1, 2, ...}`` (mean ``1 / p``), as ``floor(log(u) / log1p(-p)) + 1`` with
    ``u`` uniform in (0, 1) (JAX's; ``floor`` of an exponential of rate ``-log1p(-p)``).

    Computed in ``p``'s float dtype (float32 for Python floats, integers and 16-bit floats);
    draws beyond ``dtype``'s maximum (``p`` near 0, or ``p = 0``) are clipped to that maximum.
    ``p = 1`` gives 1.

    Args:
        key: ``uint32[2]``.
        p: success probabilities in (0, 1], broadcastable to ``shape``.
        shape: output shape (default ``p``'s shape).
        dtype: an integer dtype.

    Returns:
        An array of ``shape`` and ``dtype``, values >= 1.

    Raises:
        BluShapeError: ``p`` does not broadcast to ``shape``.
        BluTypeError: ``key`` is not a key, or ``dtype`` is not an integer.
    """
    dtype = _int_dtype(dtype, "geometric")
    key = _check_key(key, "geometric")
    p = _as_array(p)
    aval = get_aval(p)
    fdt = aval.dtype if aval.dtype in (dtypes.float32, dtypes.float64) else dtypes.float32
    shape = aval.shape if shape is None else _shape_arg(shape, "geometric")
    p = _broadcast(lax.convert_element_type(p, fdt), shape, "p", "geometric")
    log_u = lax.log(_open_unit(key, shape, fdt))
    g = lax.add(lax.floor(lax.div(log_u, lax.log1p(lax.neg(p)))), lax.full(shape, 1.0, fdt))
    # clip in float before the cast (a float above the integer range has no defined cast);
    # the largest float not above dtype's max (float32(2**31 - 1) rounds up to 2**31)
    top = np.asarray(np.iinfo(dtype).max, fdt)
    if float(top) > np.iinfo(dtype).max:
        top = np.nextafter(top, np.asarray(0, fdt))
    g = lax.min(g, lax.full(shape, float(top), fdt))
    return lax.convert_element_type(g, dtype)


# lgamma(k + 1) minus Stirling's (k + 1/2) log(k + 1) - (k + 1) + log(2 pi) / 2, for k = 0..9
_STIRLING_TAIL = np.array(
    [
        math.lgamma(k + 1.0)
        - ((k + 0.5) * math.log(k + 1.0) - (k + 1.0) + 0.5 * math.log(2 * math.pi))
        for k in range(10)
    ]
)


def _stirling_tail(k: Any) -> Any:
    """``lgamma(k + 1) - ((k + 1/2) log(k + 1) - (k + 1) + log(2 pi) / 2)`` for integral
    ``k >= 0``: the table below 10, else the series ``1/(12 z) - 1/(360 z^3) + 1/(1260 z^5)``,
    ``z = k + 1`` (error under 1e-10)."""
    z = k + 1.0
    z2 = z * z
    series = (1.0 / 12.0 - (1.0 / 360.0 - 1.0 / (1260.0 * z2)) / z2) / z
    idx = bnp.clip(k, 0, 9).astype(np.int32)
    small = bnp.take(bnp.asarray(_STIRLING_TAIL, dtype=k.dtype), idx)
    return bnp.where(k < 10, small, series)


def _binomial_inversion(key: Any, n: Any, q: Any, done: Any) -> Any:
    """Binomial(n, q) by waiting times (Devroye 1986, X.4): trials up to each success are
    geometric, ``ceil(log u / log1p(-q))``; the count is how many successes fit in ``n``
    trials. ``n q`` small: ``n q + 1`` rounds on average."""
    log1m_q = bnp.log1p(-q)
    zero = bnp.zeros_like(q)

    def cond(state: Any) -> Any:
        _, num, total = state
        return bnp.any((total <= n) & ~done)

    def body(state: Any) -> Any:
        k, num, total = state
        k, sub = split(k)
        go = (total <= n) & ~done
        g = bnp.ceil(bnp.log(_open_unit(sub, q.shape, q.dtype)) / log1m_q)
        return k, bnp.where(go, num + 1.0, num), bnp.where(go, total + g, total)

    _, num, _ = lax.while_loop(cond, body, (key, zero, zero))
    return bnp.maximum(num - 1.0, 0.0)


def _binomial_btrs(key: Any, n: Any, q: Any, done: Any) -> Any:
    """Binomial(n, q), ``q <= 1/2``, ``n q >= 10``: BTRS, the transformed rejection with
    squeeze of Hormann 1993, "The generation of binomial random variates" (J. Stat. Comput.
    Simul. 46), with the log-density ratio of TensorFlow's and JAX's implementation (Stirling
    tails, no ``lgamma`` differences to cancel)."""
    spq = bnp.sqrt(n * q * (1.0 - q))
    b = 1.15 + 2.53 * spq
    a = -0.0873 + 0.0248 * b + 0.01 * q
    c = n * q + 0.5
    v_r = 0.92 - 4.2 / b
    r = q / (1.0 - q)
    alpha = (2.83 + 5.1 / b) * spq
    m = bnp.floor((n + 1.0) * q)
    fixed = (
        (m + 0.5) * bnp.log((m + 1.0) / (r * (n - m + 1.0)))
        + _stirling_tail(m)
        + _stirling_tail(n - m)
    )

    def cond(state: Any) -> Any:
        _, ok, _ = state
        return bnp.any(~ok)

    def body(state: Any) -> Any:
        k_, ok, out = state
        k_, ku, kv = split(k_, 3)
        u = uniform(ku, q.shape, q.dtype, -0.5, 0.5)
        v = uniform(kv, q.shape, q.dtype)
        us = 0.5 - bnp.abs(u)
        k = bnp.floor((2.0 * a / us + b) * u + c)
        squeeze = (us >= 0.07) & (v <= v_r)
        inside = (k >= 0) & (k <= n)
        ks = bnp.where(inside, k, m)  # keep the bound's arithmetic finite where rejected
        log_v = bnp.log(v * alpha / (a / (us * us) + b))
        bound = (
            fixed
            + (n + 1.0) * bnp.log1p((ks - m) / (n - ks + 1.0))
            + (ks + 0.5) * bnp.log(r * (n - ks + 1.0) / (ks + 1.0))
            - _stirling_tail(ks)
            - _stirling_tail(n - ks)
        )
        accept = squeeze | (inside & (log_v <= bound))
        take = accept & ~ok
        return k_, ok | accept, bnp.where(take, k, out)

    _, _, out = lax.while_loop(cond, body, (key, done, bnp.zeros_like(q)))
    return out


def binomial(
    key: Any,
    n: Any,
    p: Any,
    shape: Sequence[int] | None = None,
    dtype: Any = dtypes.float32,
) -> Any:
    """Binomial(``n``, ``p``) counts, as floats (JAX's: ``dtype`` is a float dtype).

    With ``q = min(p, 1 - p)`` (and ``n - k`` returned where ``p > 1/2``): where ``n q < 10``,
    inversion by geometric waiting times (``n q + 1`` rounds on average); elsewhere BTRS
    rejection (Hormann 1993; acceptance above 0.8 per round), as JAX splits them. Both are
    ``while_loop``s over the whole sample (eager, ``jit``, ``vmap``). Computed in ``dtype``
    (float32 for 16-bit floats), so counts are exact up to ``2**24`` in float32. ``n = 0``,
    ``p = 0`` give 0 and ``p = 1`` gives ``n``; ``n < 0``, ``p`` outside [0, 1] or NaN give
    NaN (JAX's).

    Args:
        key: ``uint32[2]``.
        n: numbers of trials >= 0 (integral values), broadcastable to ``shape``.
        p: success probabilities in [0, 1], broadcastable to ``shape``.
        shape: output shape (default: ``n`` and ``p`` broadcast together).
        dtype: a float dtype.

    Returns:
        An array of ``shape`` and ``dtype`` holding integral values in ``[0, n]``.

    Raises:
        BluShapeError: ``n`` or ``p`` does not broadcast to ``shape`` (or, with no ``shape``,
            to each other).
        BluTypeError: ``key`` is not a key, or ``dtype`` is not a float.
    """
    key, dtype, shape, (n, p) = _prologue("binomial", key, dtype, shape, compute=True, n=n, p=p)
    invalid = (n < 0) | ~((p >= 0) & (p <= 1)) | bnp.isnan(n)
    flip = p > 0.5
    q = bnp.where(flip, 1.0 - p, p)
    trivial = invalid | (n == 0) | (q == 0)
    # where trivial, harmless parameters keep both loops' arithmetic finite
    safe_n = bnp.where(trivial, 1.0, n)
    safe_q = bnp.where(trivial, 0.5, q)
    small = safe_n * safe_q < 10.0
    k_inv, k_btrs = split(key)
    inv = _binomial_inversion(k_inv, safe_n, safe_q, trivial | ~small)
    btrs = _binomial_btrs(k_btrs, safe_n, safe_q, trivial | small)
    k = bnp.where(small, inv, btrs)
    k = bnp.where(trivial, 0.0, k)
    k = bnp.where(flip, n - k, k)
    k = bnp.where(invalid, np.nan, k)
    return lax.convert_element_type(k, dtype)


def multinomial(
    key: Any,
    n: Any,
    p: Any,
    *,
    shape: Sequence[int] | None = None,
    dtype: Any = dtypes.float32,
    unroll: int | bool = 1,
) -> Any:
    """Multinomial counts of ``n`` trials over the categories of the last axis of ``p``, as
    floats (JAX's).

    Conditional binomials, category by category in a ``lax.scan`` (JAX's): category ``i``
    gets ``Binomial(n_left, p_i / (p_i + ... + p_K))`` of the ``n_left`` trials the earlier
    categories left, so the counts sum to ``n`` exactly; ``p`` need not be normalized.

    Args:
        key: ``uint32[2]``.
        n: numbers of trials >= 0 (integral values), broadcastable to ``shape[:-1]``.
        p: category probabilities ``>= 0`` of shape ``(..., K)``, broadcastable to ``shape``.
        shape: output shape, ending in ``K`` (default ``p``'s shape).
        dtype: a float or integer dtype.
        unroll: ``lax.scan``'s unroll over the categories (a performance hint).

    Returns:
        An array of ``shape`` and ``dtype`` whose last axis sums to ``n``.

    Raises:
        BluShapeError: ``p`` is a scalar, ``shape`` does not end in ``p``'s ``K``, or ``n`` /
            ``p`` does not broadcast to it.
        BluTypeError: ``key`` is not a key, or ``dtype`` is neither a float nor an integer.
    """
    if dtypes.is_int(dtypes.canonicalize(dtype)):  # JAX's take an integer dtype too
        dtype = dtypes.canonicalize(dtype)
        comp = dtypes.float64 if dtype.itemsize == 8 else dtypes.float32
    else:
        dtype = _float_dtype(dtype, "multinomial")
        comp = _compute_dtype(dtype)
    key = _check_key(key, "multinomial")
    n = lax.convert_element_type(_as_array(n, comp), comp)
    p = lax.convert_element_type(_as_array(p, comp), comp)
    p_aval = get_aval(p)
    if p_aval.ndim < 1:
        raise BluShapeError(
            with_user_line(
                f"random.multinomial: p must have a category axis, got {p_aval.str_short()}"
            )
        )
    ncat = p_aval.shape[-1]
    shape = p_aval.shape if shape is None else _shape_arg(shape, "multinomial")
    if len(shape) < 1 or shape[-1] != ncat:
        raise BluShapeError(
            with_user_line(
                f"random.multinomial: shape {shape} must end in the number of categories "
                f"{ncat} (p {p_aval.str_short()})"
            )
        )
    n = _broadcast(n, shape[:-1], "n", "multinomial")
    p = _broadcast(p, shape, "p", "multinomial")
    if ncat == 0 or math.prod(shape) == 0:
        return lax.full(shape, 0, dtype)
    p = bnp.moveaxis(p, -1, 0)
    left = lax.cumsum(p, 0, reverse=True)
    ratios = bnp.clip(p / bnp.where(left == 0, 1.0, left), 0.0, 1.0)

    def step(remaining: Any, x: Any) -> tuple[Any, Any]:
        ratio, k = x
        count = binomial(k, remaining, ratio, dtype=comp)
        return remaining - count, count

    _, counts = lax.scan(step, n, (ratios, split(key, ncat)), unroll=unroll)
    return lax.convert_element_type(bnp.moveaxis(counts, 0, -1), dtype)
