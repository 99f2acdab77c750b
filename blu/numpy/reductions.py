"""Reductions: sum, prod, mean, var, std, max, min, argmax, argmin, all, any, cumulative ones,
and a few statistics built on them (ptp, average, median, quantile, count_nonzero, nan*).

``axis`` is None (all axes), an int or a tuple of ints (negative ones count from the end);
``keepdims`` keeps reduced axes with size 1. Dtypes follow JAX: sums and products of bool and of
integers narrower than 32 bits give int32 (uint32 for unsigned), means of integers give float32,
and float16/bfloat16 means and variances are computed in float32.
"""

from __future__ import annotations

import builtins
import math
from typing import Any

import numpy as np

from blu import lax
from blu.core import dtypes
from blu.core.errors import BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.numpy._promote import (
    asarray_operand,
    asarray_operand_in,
    canonicalize_axes,
    canonicalize_axis,
    concrete_value,
    to_inexact,
)
from blu.numpy.logic import equal, logical_and, logical_not, logical_or, to_bool
from blu.numpy.manipulation import broadcast_to, moveaxis
from blu.numpy.selection import take
from blu.numpy.ufuncs import (
    _where,
    add,
    isclose,
    isnan,
    maximum,
    minimum,
    multiply,
    subtract,
    true_divide,
)

# fmt: off
__all__ = [
    "sum", "prod", "product", "mean", "var", "std", "max", "min", "amax", "amin", "argmax",
    "argmin", "all", "any", "cumsum", "cumprod", "cumulative_sum", "cumulative_prod", "ptp",
    "count_nonzero", "average", "median", "quantile", "percentile", "nansum", "nanmean",
    "nanmax", "nanmin", "allclose", "array_equal"
]
# fmt: on


def _prep(a: Any, axis: Any, name: str) -> tuple[Any, tuple[int, ...]]:
    a = asarray_operand(a)
    return a, tuple(sorted(canonicalize_axes(axis, get_aval(a).ndim, name)))


def _keep(out: Any, in_shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool) -> Any:
    if not keepdims:
        return out
    return lax.reshape(out, tuple(1 if i in axes else d for i, d in enumerate(in_shape)))


def _count(shape: tuple[int, ...], axes: tuple[int, ...]) -> int:
    return math.prod(shape[i] for i in axes)


def _accumulation_dtype(d: np.dtype) -> np.dtype:
    """JAX's ``promote_integers``: bool and narrow integers sum in (u)int32."""
    if d == dtypes.bool_:
        return dtypes.default_int
    if dtypes.is_int(d) and d.itemsize < 4:
        return dtypes.uint32 if dtypes.is_unsigned(d) else dtypes.int32
    return d


def _cast(a: Any, dtype: np.dtype) -> Any:
    aval = get_aval(a)
    if aval.dtype == dtype:
        return a
    return lax.convert_element_type(a, dtype, weak_type=aval.weak_type and dtype == aval.dtype)


def _masked(a: Any, where: Any, fill: Any) -> Any:
    if where is None:
        return a
    aval = get_aval(a)
    return _where(where, a, lax.full(aval.shape, fill, aval.dtype))


def _accumulate(name, reduce, combine, identity, a, axis, dtype, keepdims, initial, where,
                promote_integers):  # fmt: skip
    """sum and prod: pick the accumulation dtype, mask with ``identity``, reduce, fold in
    ``initial`` with ``combine``."""
    a, axes = _prep(a, axis, name)
    d = (
        dtypes.canonicalize(dtype)
        if dtype is not None
        else (_accumulation_dtype(get_aval(a).dtype) if promote_integers else get_aval(a).dtype)
    )
    a = _masked(_cast(a, d), where, identity)
    in_shape = get_aval(a).shape
    r = reduce(a, axes)
    if initial is not None:
        r = combine(r, lax.convert_element_type(asarray_operand_in(initial, d), d))
    return _keep(r, in_shape, axes, keepdims)


def sum(
    a: Any,
    axis: Any = None,
    dtype: Any = None,
    out: None = None,
    keepdims: bool = False,
    initial: Any = None,
    where: Any = None,
    promote_integers: bool = True,
) -> Any:
    """Sum over ``axis``. Bool and narrow integers sum in int32/uint32 unless ``dtype`` is
    given; ``where`` masks elements out; ``initial`` is added."""
    return _accumulate("sum", lax.reduce_sum, add, 0, a, axis, dtype, keepdims, initial, where,
                       promote_integers)  # fmt: skip


def prod(
    a: Any,
    axis: Any = None,
    dtype: Any = None,
    out: None = None,
    keepdims: bool = False,
    initial: Any = None,
    where: Any = None,
    promote_integers: bool = True,
) -> Any:
    """Product over ``axis`` (dtypes as for ``sum``; ``dtype=bool``: whether every entry is
    nonzero, as JAX's and numpy's)."""
    return _accumulate("prod", _reduce_prod, multiply, 1, a, axis, dtype, keepdims, initial,
                       where, promote_integers)  # fmt: skip


def _reduce_prod(a: Any, axes: tuple[int, ...]) -> Any:
    return (lax.reduce_and if get_aval(a).dtype == dtypes.bool_ else lax.reduce_prod)(a, axes)


product = prod


def _inexact_dtypes(a: Any, dtype: Any) -> tuple[np.dtype, np.dtype]:
    """(result dtype, computation dtype) of mean/var: ints -> float32, f16/bf16 computed in f32."""
    if dtype is not None:
        out = dtypes.canonicalize(dtype)
    else:
        d = get_aval(a).dtype
        out = d if dtypes.is_inexact(d) else dtypes.default_float
    comp = dtypes.float32 if out in (dtypes.float16, dtypes.bfloat16) else out
    if not dtypes.is_inexact(comp):
        comp = dtypes.default_float
    return out, comp


def _where_count(a: Any, axes: tuple[int, ...], where: Any, comp: np.dtype, keepdims: bool):
    if where is None:
        return np.asarray(_count(get_aval(a).shape, axes), comp)[()]

    mask = broadcast_to(asarray_operand(where), get_aval(a).shape)
    return sum(lax.convert_element_type(mask, comp), axes, keepdims=keepdims)


def mean(
    a: Any,
    axis: Any = None,
    dtype: Any = None,
    out: None = None,
    keepdims: bool = False,
    *,
    where: Any = None,
) -> Any:
    """Arithmetic mean over ``axis`` (NaN over an empty axis). Integers give float32."""
    a, axes = _prep(a, axis, "mean")
    out_d, comp = _inexact_dtypes(a, dtype)
    a = _cast(a, comp)
    s = sum(a, axes, keepdims=keepdims, where=where)
    n = _where_count(a, axes, where, comp, keepdims)
    return _cast(lax.div(s, n) if not isinstance(n, np.generic) else _div_scalar(s, n), out_d)


def _div_scalar(s: Any, n: np.generic) -> Any:
    aval = get_aval(s)
    return lax.div(s, lax.full(aval.shape, n, aval.dtype))


def var(
    a: Any,
    axis: Any = None,
    dtype: Any = None,
    out: None = None,
    ddof: int = 0,
    keepdims: bool = False,
    *,
    where: Any = None,
    correction: Any = None,
) -> Any:
    """Variance ``sum((a - mean)^2) / (N - ddof)`` over ``axis`` (``correction`` is an alias of
    ``ddof``). Integers give float32."""
    if correction is not None:
        ddof = correction
    a, axes = _prep(a, axis, "var")
    out_d, comp = _inexact_dtypes(a, dtype)
    a = _cast(a, comp)
    m = mean(a, axes, keepdims=True, where=where)
    c = subtract(a, m)
    if dtypes.is_complex(comp):  # |c|^2, real (numpy's complex var)
        c2 = lax.real(lax.mul(c, lax.conj(c)))
        out_d, comp = dtypes.real_dtype(out_d), dtypes.real_dtype(comp)
    else:
        c2 = lax.mul(c, c)
    s = sum(c2, axes, keepdims=keepdims, where=where)
    n = _where_count(a, axes, where, comp, keepdims)
    if isinstance(n, np.generic):
        res = _div_scalar(s, np.asarray(builtins.max(float(n) - ddof, 0), comp)[()])
    else:
        res = lax.div(s, maximum(subtract(n, ddof), 0))
    return _cast(res, out_d)


def std(
    a: Any,
    axis: Any = None,
    dtype: Any = None,
    out: None = None,
    ddof: int = 0,
    keepdims: bool = False,
    *,
    where: Any = None,
    correction: Any = None,
) -> Any:
    """Standard deviation: ``sqrt(var(...))``."""
    v = var(a, axis, dtype, ddof=ddof, keepdims=keepdims, where=where, correction=correction)
    if not dtypes.is_float(get_aval(v).dtype):
        return v
    # zero variance: value 0 and gradient 0 (the subgradient; sqrt's is infinite there), by
    # taking sqrt of 1 in its place (docs/conventions.md)
    zero = lax.eq(v, lax.full_like(v, 0))
    safe = lax.select(zero, lax.full_like(v, 1), v)
    return lax.select(zero, lax.full_like(v, 0), lax.sqrt(safe))


def _extremum(a: Any, axis: Any, keepdims: bool, initial: Any, where: Any, is_max: bool) -> Any:
    name = "max" if is_max else "min"
    a, axes = _prep(a, axis, name)
    aval = get_aval(a)
    if initial is None and where is not None:
        raise BluValueError(with_user_line(f"{name}: where= needs initial= (the empty value)"))
    if initial is None and _count(aval.shape, axes) == 0 and axes:
        raise BluValueError(
            with_user_line(
                f"{name}: zero-size reduction over axes {axes} of {aval.str_short()} "
                "has no identity; pass initial="
            )
        )
    if where is not None:
        a = _masked(a, where, initial)
    if aval.dtype == dtypes.bool_:
        r = lax.reduce_or(a, axes) if is_max else lax.reduce_and(a, axes)
    else:
        r = lax.reduce_max(a, axes) if is_max else lax.reduce_min(a, axes)
    if initial is not None:
        init = lax.convert_element_type(asarray_operand_in(initial, aval.dtype), aval.dtype)
        r = maximum(r, init) if is_max else minimum(r, init)
    return _keep(r, aval.shape, axes, keepdims)


def max(
    a: Any,
    axis: Any = None,
    out: None = None,
    keepdims: bool = False,
    initial: Any = None,
    where: Any = None,
) -> Any:
    """Maximum over ``axis`` (NaN propagates).

    Raises:
        BluValueError: an empty reduction without ``initial`` (as numpy).
    """
    return _extremum(a, axis, keepdims, initial, where, True)


def min(
    a: Any,
    axis: Any = None,
    out: None = None,
    keepdims: bool = False,
    initial: Any = None,
    where: Any = None,
) -> Any:
    """Minimum over ``axis`` (NaN propagates); see ``max``."""
    return _extremum(a, axis, keepdims, initial, where, False)


amax, amin = max, min


def _arg(a: Any, axis: Any, keepdims: bool, is_max: bool) -> Any:
    name = "argmax" if is_max else "argmin"
    a = asarray_operand(a)
    shape = get_aval(a).shape
    if axis is None:
        flat = lax.reshape(a, (get_aval(a).size,))
        r = lax.argmax(flat, 0, dtypes.int32) if is_max else lax.argmin(flat, 0, dtypes.int32)
        return lax.reshape(r, (1,) * len(shape)) if keepdims else r
    ax = canonicalize_axis(axis, len(shape), name)
    r = lax.argmax(a, ax, dtypes.int32) if is_max else lax.argmin(a, ax, dtypes.int32)
    return _keep(r, shape, (ax,), keepdims)


def argmax(a: Any, axis: int | None = None, out: None = None, keepdims: bool = False) -> Any:
    """Index of the (first) maximum along ``axis`` (of the raveled array when None); int32."""
    return _arg(a, axis, keepdims, True)


def argmin(a: Any, axis: int | None = None, out: None = None, keepdims: bool = False) -> Any:
    """Index of the (first) minimum along ``axis``; int32."""
    return _arg(a, axis, keepdims, False)


def _truth(a: Any) -> Any:
    return to_bool(a)


def all(
    a: Any, axis: Any = None, out: None = None, keepdims: bool = False, *, where: Any = None
) -> Any:
    """True where every element (along ``axis``) is nonzero."""
    a, axes = _prep(_truth(a), axis, "all")
    in_shape = get_aval(a).shape
    return _keep(lax.reduce_and(_masked(a, where, True), axes), in_shape, axes, keepdims)


def any(
    a: Any, axis: Any = None, out: None = None, keepdims: bool = False, *, where: Any = None
) -> Any:
    """True where some element (along ``axis``) is nonzero."""
    a, axes = _prep(_truth(a), axis, "any")
    in_shape = get_aval(a).shape
    return _keep(lax.reduce_or(_masked(a, where, False), axes), in_shape, axes, keepdims)


def _cumulative(a: Any, axis: Any, dtype: Any, name: str, lax_fn: Any) -> Any:
    a = asarray_operand(a)
    if axis is None:
        a, axis = lax.reshape(a, (get_aval(a).size,)), 0
    ax = canonicalize_axis(axis, get_aval(a).ndim, name)
    d = dtypes.canonicalize(dtype) if dtype is not None else _accumulation_dtype(get_aval(a).dtype)
    if d == dtypes.bool_:  # JAX: truth values accumulated in int, then back to bool
        ints = _cast(_cast(a, dtypes.bool_), dtypes.default_int)
        return _cast(lax_fn(ints, ax), dtypes.bool_)
    return lax_fn(_cast(a, d), ax)


def cumsum(a: Any, axis: int | None = None, dtype: Any = None, out: None = None) -> Any:
    """Cumulative sum along ``axis`` (of the raveled array when None); dtypes as for ``sum``
    (``dtype=bool``: whether any entry so far is nonzero, as JAX)."""
    return _cumulative(a, axis, dtype, "cumsum", lax.cumsum)


def cumprod(a: Any, axis: int | None = None, dtype: Any = None, out: None = None) -> Any:
    """Cumulative product along ``axis``; dtypes as for ``prod`` (``dtype=bool``: whether
    every entry so far is nonzero, as JAX)."""
    return _cumulative(a, axis, dtype, "cumprod", lax.cumprod)


def _with_initial(fn: Any, identity: int) -> Any:
    def cumulative(
        x: Any, axis: int | None = None, dtype: Any = None, include_initial: bool = False
    ) -> Any:
        out = fn(x, axis, dtype)
        if not include_initial:
            return out
        ax = 0 if axis is None else canonicalize_axis(axis, get_aval(out).ndim)
        cfg = [(0, 0, 0)] * get_aval(out).ndim
        cfg[ax] = (1, 0, 0)
        return lax.pad(out, np.asarray(identity, get_aval(out).dtype)[()], cfg)

    cumulative.__doc__ = (
        f"``{fn.__name__}`` under the Array API's name; with ``include_initial`` the result "
        f"starts with {identity} (one more element along ``axis``)."
    )
    return cumulative


cumulative_sum = _with_initial(cumsum, 0)
cumulative_prod = _with_initial(cumprod, 1)


def ptp(a: Any, axis: Any = None, out: None = None, keepdims: bool = False) -> Any:
    """``max - min`` over ``axis``."""
    return subtract(max(a, axis, keepdims=keepdims), min(a, axis, keepdims=keepdims))


def count_nonzero(a: Any, axis: Any = None, keepdims: bool = False) -> Any:
    """Number of nonzero elements along ``axis`` (int32)."""
    return sum(_truth(a), axis, dtypes.int32, keepdims=keepdims)


def average(
    a: Any, axis: Any = None, weights: Any = None, returned: bool = False, keepdims: bool = False
) -> Any:
    """Weighted mean ``sum(a * w) / sum(w)`` over ``axis`` (1-D weights apply along one axis)."""
    a = asarray_operand(a)
    if weights is None:
        avg = mean(a, axis, keepdims=keepdims)
        if not returned:
            return avg
        a_shape, axes = get_aval(a).shape, canonicalize_axes(axis, get_aval(a).ndim)
        return avg, lax.full_like(avg, _count(a_shape, axes))
    w = asarray_operand(weights)
    a_shape, w_shape = get_aval(a).shape, get_aval(w).shape
    if w_shape != a_shape:
        if axis is None or len(w_shape) != 1:
            raise BluValueError(with_user_line("average: 1-D weights need an int axis"))
        ax = canonicalize_axis(axis, len(a_shape), "average")
        w = lax.broadcast_in_dim(w, a_shape, (ax,))
    scl = sum(w, axis, keepdims=keepdims)
    avg = true_divide(sum(multiply(a, w), axis, keepdims=keepdims), scl)
    return (avg, lax.convert_element_type(scl, get_aval(avg).dtype)) if returned else avg


def quantile(
    a: Any, q: Any, axis: Any = None, method: str = "linear", keepdims: bool = False
) -> Any:
    """The ``q``-th quantiles (static q in [0, 1]) along ``axis`` (an int, a tuple of axes or
    None for all), by sorting and linear interpolation between the neighbouring order
    statistics (numpy's default 'linear').

    Returns:
        shape ``q.shape + reduced shape``; float. NaN where the reduced axes are empty or hold
        a NaN (as numpy's ``median`` and JAX's ``quantile``).
    """
    if method != "linear":
        raise BluValueError(with_user_line("quantile: only method='linear' is supported"))
    qv = concrete_value(q, "quantile (q)").astype(np.float64)
    a = asarray_operand(a)
    if axis is None:
        shape0 = get_aval(a).shape
        a, ax = lax.reshape(a, (get_aval(a).size,)), 0
        keep_shape = (1,) * len(shape0)
    elif isinstance(axis, (tuple, list)):  # the axes moved last and merged into one
        shape0 = get_aval(a).shape
        axes = canonicalize_axes(tuple(axis), len(shape0), "quantile")
        kept = [i for i in range(len(shape0)) if i not in axes]
        a = lax.transpose(a, tuple(kept) + tuple(axes))
        merged = tuple(shape0[i] for i in kept) + (math.prod(shape0[i] for i in axes),)
        a, ax = lax.reshape(a, merged), len(kept)
        keep_shape = tuple(1 if i in axes else d for i, d in enumerate(shape0))
    else:
        ax = canonicalize_axis(axis, get_aval(a).ndim, "quantile")
        keep_shape = tuple(1 if i == ax else d for i, d in enumerate(get_aval(a).shape))

    a = to_inexact(a)
    n = get_aval(a).shape[ax]
    if n == 0:  # no order statistics: NaN, as numpy's median and JAX's quantile
        rest = tuple(d for i, d in enumerate(get_aval(a).shape) if i != ax)
        shape = qv.shape + (keep_shape if keepdims else rest)
        return lax.full(shape, np.nan, get_aval(a).dtype)
    s = lax.sort(a, ax)
    pos = qv * (n - 1)
    lo = np.floor(pos).astype(np.int32)
    hi = np.minimum(lo + 1, n - 1).astype(np.int32)
    # float16 / bfloat16 interpolate in float32 and round once (numpy's and JAX's values: the
    # difference of the neighbours rounded to 8 bits moved bfloat16 medians by an ulp)
    dtype = get_aval(a).dtype
    comp = dtypes.float32 if np.dtype(dtype).itemsize == 2 else dtype
    frac = (pos - lo).astype(comp)
    v_lo = moveaxis(take(s, lo.reshape(-1), axis=ax), ax, 0)
    v_hi = moveaxis(take(s, hi.reshape(-1), axis=ax), ax, 0)
    v_lo, v_hi = (lax.convert_element_type(v, comp) for v in (v_lo, v_hi))
    rest = get_aval(v_lo).shape[1:]
    f = lax.broadcast_in_dim(np.asarray(frac.reshape(-1)), get_aval(v_lo).shape, (0,))
    out = lax.convert_element_type(add(v_lo, multiply(subtract(v_hi, v_lo), f)), dtype)
    # a NaN anywhere in a row makes its quantiles NaN (numpy's and JAX's); the sort alone
    # would read finite order statistics below the NaNs sorted last
    nan_row = any(isnan(a), ax)
    nan_row = lax.broadcast_in_dim(nan_row, get_aval(out).shape, tuple(range(1, len(rest) + 1)))
    out = _where(nan_row, np.nan, out)
    out_rest = keep_shape if keepdims else rest
    return lax.reshape(out, qv.shape + out_rest)


def percentile(
    a: Any, q: Any, axis: Any = None, method: str = "linear", keepdims: bool = False
) -> Any:
    """``quantile(a, q / 100, ...)``."""
    return quantile(a, concrete_value(q, "percentile (q)") / 100.0, axis, method, keepdims)


def median(a: Any, axis: Any = None, keepdims: bool = False) -> Any:
    """The median along ``axis`` (``quantile(a, 0.5)``)."""
    return quantile(a, 0.5, axis, keepdims=keepdims)


def _nan_fill(a: Any, fill: Any) -> Any:
    a = asarray_operand(a)
    return _where(isnan(a), fill, a) if dtypes.is_inexact(get_aval(a).dtype) else a


def nansum(a: Any, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Any:
    """``sum`` with NaN counted as 0."""
    return sum(_nan_fill(a, 0), axis, dtype, keepdims=keepdims)


def nanmean(a: Any, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Any:
    """``mean`` of the non-NaN elements."""
    a = asarray_operand(a)
    if not dtypes.is_inexact(get_aval(a).dtype):
        return mean(a, axis, dtype, keepdims=keepdims)
    return mean(a, axis, dtype, keepdims=keepdims, where=logical_not(isnan(a)))


def _nan_where_all_nan(r: Any, a: Any, axis: Any, keepdims: bool) -> Any:
    a = asarray_operand(a)
    if not dtypes.is_float(get_aval(a).dtype):
        return r
    return _where(all(isnan(a), axis, keepdims=keepdims), np.nan, r)


def nanmax(a: Any, axis: Any = None, keepdims: bool = False) -> Any:
    """``max`` ignoring NaN (NaN where all are NaN)."""
    r = max(_nan_fill(a, -np.inf), axis, keepdims=keepdims)
    return _nan_where_all_nan(r, a, axis, keepdims)


def nanmin(a: Any, axis: Any = None, keepdims: bool = False) -> Any:
    """``min`` ignoring NaN (NaN where all are NaN)."""
    r = min(_nan_fill(a, np.inf), axis, keepdims=keepdims)
    return _nan_where_all_nan(r, a, axis, keepdims)


# ---- closeness: all of isclose / equal ----------------------------------------------------------


def allclose(a: Any, b: Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False):
    """True when ``isclose`` holds everywhere (a 0-d bool array)."""
    return all(isclose(a, b, rtol, atol, equal_nan))


def array_equal(a1: Any, a2: Any, equal_nan: bool = False) -> Any:
    """True when the shapes agree and all elements are equal (a 0-d bool array)."""
    a1, a2 = asarray_operand(a1), asarray_operand(a2)
    if get_aval(a1).shape != get_aval(a2).shape:
        return lax.full((), False, dtypes.bool_)
    eq = equal(a1, a2)
    if equal_nan:
        eq = logical_or(eq, logical_and(isnan(a1), isnan(a2)))
    return all(eq)
