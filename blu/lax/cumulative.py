"""Cumulative reductions along one axis: cumsum, cumprod, cummax, cummin (primitives) and
cumlogsumexp (an ``associative_scan`` of a stable ``logaddexp``).

Each keeps the operand's shape and dtype; ``reverse=True`` scans from the end of the axis. The
public functions are re-exported by ``blu.lax.reductions``.
"""

from __future__ import annotations

__all__ = ["cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp"]

from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core.aval import ShapedArray
from blu.core.errors import BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.core.primitive import Primitive
from blu.lax._base import any_dtype, check_dtype, compute_in_f32, is_numeric
from blu.lax.associative_scan import associative_scan
from blu.lax.bits import and_
from blu.lax.elementwise import add, eq, exp, gt, mul, ne, neg, select, sub
from blu.lax.shapes import concatenate, full, full_like, rev
from blu.lax.slicing import slice as slice_
from blu.lax.sorting import take_along_axis
from blu.lax.special import log1p
from blu.transforms.ad_util import Zero, nondifferentiable, tangent_aval


def _scan_np(fn, x: np.ndarray, axis: int, reverse: bool) -> np.ndarray:
    if reverse:
        return np.flip(fn(np.flip(x, axis), axis), axis)
    return fn(x, axis)


def _check_axis(name: str, x: ShapedArray, axis: int) -> None:
    if not 0 <= axis < x.ndim:
        raise BluValueError(with_user_line(f"{name}: axis {axis} out of range for {x.str_short()}"))


def _cumulative_aval(name: str, allowed, kind: str):
    def rule(x: ShapedArray, *, axis: int, reverse: bool) -> ShapedArray:
        _check_axis(name, x, axis)
        check_dtype(name, x, allowed, kind)
        return x

    return rule


def _batch_cumulative(prim: Primitive) -> None:
    def rule(axis_size, args, dims, *, axis, **params):
        (x,), (d,) = args, dims
        return prim.bind(x, axis=axis + (axis >= d), **params), d

    prim.def_batch(rule)


def _cumulative(name: str, np_fn, allowed=is_numeric, kind: str = "numeric") -> Primitive:
    p = Primitive(name)

    @compute_in_f32
    def impl(x: np.ndarray, *, axis: int, reverse: bool) -> np.ndarray:
        with np.errstate(over="ignore", invalid="ignore"):
            return _scan_np(lambda a, ax: np_fn(a, axis=ax, dtype=x.dtype), x, axis, reverse)

    p.def_impl(impl)
    p.def_abstract_eval(_cumulative_aval(name, allowed, kind))
    _batch_cumulative(p)
    return p


# ---- cumsum: linear ----------------------------------------------------------------------------

cumsum_p = _cumulative("cumsum", np.cumsum)


@cumsum_p.def_jvp
def _cumsum_jvp(primals, tangents, *, axis, reverse):
    (x,), (t,) = primals, tangents
    out = cumsum_p.bind(x, axis=axis, reverse=reverse)
    if isinstance(t, Zero):
        return out, Zero(tangent_aval(get_aval(out)))
    return out, cumsum_p.bind(t, axis=axis, reverse=reverse)


@cumsum_p.def_transpose
def _cumsum_transpose(ct, x, *, axis, reverse):
    # out_i = sum_{j<=i} x_j, so x's cotangent is sum_{i>=j} ct_i: the scan the other way
    if isinstance(ct, Zero):
        return [None]
    return [cumsum_p.bind(ct, axis=axis, reverse=not reverse)]


# ---- cumprod -----------------------------------------------------------------------------------

cumprod_p = _cumulative("cumprod", np.cumprod)


def dual_mul(a: tuple[Any, Any], b: tuple[Any, Any]) -> tuple[Any, Any]:
    """The product of two first-order dual numbers ``(x, t)``: ``(xa xb, xa tb + ta xb)``.
    The JVPs of ``cumprod`` (a prefix scan of them) and of ``reduce_prod`` (a tree) use it."""
    return mul(a[0], b[0]), add(mul(a[0], b[1]), mul(a[1], b[0]))


@cumprod_p.def_jvp
def _cumprod_jvp(primals, tangents, *, axis, reverse):
    """d out_i = sum_{j<=i} t_j prod_{k<=i, k!=j} x_k, as a prefix scan (Hillis-Steele, log2(n)
    steps) of first-order dual numbers ``(x, t)`` under their product.

    Only multiplications and additions, never a division: exact at any number of zeros, and
    so are all higher derivatives (a division or zero-counting rule is not).
    """
    (x,), (t,) = primals, tangents
    out = cumprod_p.bind(x, axis=axis, reverse=reverse)
    if isinstance(t, Zero) or not dtypes.is_inexact(get_aval(x).dtype):
        return out, Zero(tangent_aval(get_aval(out)))
    shape, dt = get_aval(x).shape, get_aval(x).dtype
    n = shape[axis]
    cur = (rev(x, (axis,)), rev(t, (axis,))) if reverse else (x, t)

    def shifted(v, d, fill):  # v moved d places along the axis, the first d filled
        lo = list(shape)
        lo[axis] = d
        limit = list(shape)
        limit[axis] = n - d
        head = slice_(v, (0,) * len(shape), tuple(limit))
        return concatenate([full(tuple(lo), fill, dt), head], axis)

    d = 1
    while d < n:
        cur = dual_mul(cur, (shifted(cur[0], d, 1), shifted(cur[1], d, 0)))
        d *= 2
    tangent = rev(cur[1], (axis,)) if reverse else cur[1]
    return out, tangent


# ---- cummax / cummin ---------------------------------------------------------------------------

cummax_p = _cumulative("cummax", lambda a, axis, dtype: np.maximum.accumulate(a, axis), any_dtype)
cummin_p = _cumulative("cummin", lambda a, axis, dtype: np.minimum.accumulate(a, axis), any_dtype)

# The index, along ``axis``, of the element each running extremum came from: the first position
# in scan order that attains it (a NaN wins once seen, as NaN propagates through max/min).
cumarg_p = Primitive("cumulative_argextremum")


@cumarg_p.def_impl
def _cumarg_impl(x: np.ndarray, *, axis: int, reverse: bool, kind: str) -> np.ndarray:
    n = x.shape[axis]
    index_dtype = np.int32 if n < 2**31 else np.int64
    if n == 0:
        return np.zeros(x.shape, index_dtype)
    if x.dtype in (dtypes.bfloat16, dtypes.float16):
        x = x.astype(np.float32)
    x = np.moveaxis(x, axis, -1)
    if reverse:
        x = x[..., ::-1]
    op = np.maximum if kind == "max" else np.minimum
    with np.errstate(invalid="ignore"):
        running = op.accumulate(x, axis=-1)
    prev, cur = running[..., :-1], x[..., 1:]
    better = np.greater(cur, prev) if kind == "max" else np.less(cur, prev)
    if dtypes.is_float(x.dtype):
        better |= np.isnan(cur) & ~np.isnan(prev)
    record = np.concatenate([np.ones(x.shape[:-1] + (1,), bool), better], axis=-1)
    idx = np.maximum.accumulate(np.where(record, np.arange(n), 0), axis=-1)
    if reverse:
        idx = (n - 1 - idx)[..., ::-1]
    return np.moveaxis(idx, -1, axis).astype(index_dtype)


@cumarg_p.def_abstract_eval
def _cumarg_abstract_eval(x: ShapedArray, *, axis: int, reverse: bool, kind: str):
    _check_axis("cumulative_argextremum", x, axis)
    return ShapedArray(x.shape, np.int32 if x.shape[axis] < 2**31 else np.int64)


nondifferentiable(cumarg_p)
_batch_cumulative(cumarg_p)


def _chooser_jvp(prim: Primitive, kind: str) -> None:
    def rule(primals, tangents, *, axis, reverse):
        (x,), (t,) = primals, tangents
        out = prim.bind(x, axis=axis, reverse=reverse)
        if isinstance(t, Zero) or not dtypes.is_inexact(get_aval(x).dtype):
            return out, Zero(tangent_aval(get_aval(out)))
        idx = cumarg_p.bind(x, axis=axis, reverse=reverse, kind=kind)
        return out, take_along_axis(t, idx, axis)

    prim.def_jvp(rule)


_chooser_jvp(cummax_p, "max")
_chooser_jvp(cummin_p, "min")


# ---- the lax functions users call --------------------------------------------------------------


def _bind(prim: Primitive, x: Any, axis: int, reverse: bool) -> Any:
    aval = get_aval(x)
    axis = dtypes.static_int(axis, f"{prim.name}: axis")
    if not -aval.ndim <= axis < aval.ndim:
        raise BluValueError(
            with_user_line(f"{prim.name}: axis {axis} out of range for {aval.str_short()}")
        )
    return prim.bind(x, axis=axis % aval.ndim, reverse=bool(reverse))


def cumsum(x: Any, axis: int = 0, reverse: bool = False) -> Any:
    """Cumulative sum along ``axis``: ``out[..., i, ...] = sum(x[..., :i+1, ...])`` (from the end
    with ``reverse``). Numeric dtypes; shape and dtype kept. Linear: its transpose is the cumsum
    in the other direction.

    Raises:
        BluValueError: axis out of range. BluTypeError: bool operand.
    """
    return _bind(cumsum_p, x, axis, reverse)


def cumprod(x: Any, axis: int = 0, reverse: bool = False) -> Any:
    """Cumulative product along ``axis`` (numeric dtypes). Its derivative is exact when ``x``
    has zeros, at every order (see ``_cumprod_jvp``)."""
    return _bind(cumprod_p, x, axis, reverse)


def cummax(x: Any, axis: int = 0, reverse: bool = False) -> Any:
    """Running maximum along ``axis`` (any dtype; NaN propagates). The derivative of each output
    is the tangent of the element it came from: the first one in scan order attaining it (on
    ties JAX's associative scan would average instead)."""
    return _bind(cummax_p, x, axis, reverse)


def cummin(x: Any, axis: int = 0, reverse: bool = False) -> Any:
    """Running minimum along ``axis``; see ``cummax``."""
    return _bind(cummin_p, x, axis, reverse)


def _logaddexp(x: Any, y: Any) -> Any:
    """``log(exp(x) + exp(y))`` without overflow, as ``blu.numpy.logaddexp``: both ``-inf``
    gives ``-inf`` with derivative 0 (docs/conventions.md), a tie splits the derivative evenly,
    ``+inf`` wins over anything but NaN, and NaN propagates."""
    ninf = full_like(x, -np.inf)
    both_ninf = and_(eq(x, ninf), eq(y, ninf))
    zero = full_like(x, 0)
    x, y = select(both_ninf, zero, x), select(both_ninf, zero, y)
    d = sub(y, x)
    pos = gt(d, zero)
    m = select(pos, y, x)
    neg_abs = select(pos, neg(d), d)  # -|d|, but equal to d at a tie (so both get 1/2)
    out = add(m, log1p(exp(neg_abs)))
    # d is NaN for a NaN operand or for +inf and +inf (whose sum is +inf, as the NaN's is NaN)
    return select(both_ninf, ninf, select(ne(d, d), add(x, y), out))


def cumlogsumexp(x: Any, axis: int = 0, reverse: bool = False) -> Any:
    """Cumulative log-sum-exp along ``axis``: ``out[..., i, ...] = log(sum(exp(x[..., :i+1,
    ...])))`` (from the end with ``reverse``), computed without overflow or underflow as an
    ``associative_scan`` of a stable ``logaddexp`` (``jax.lax.cumlogsumexp``).

    A prefix of only ``-inf`` gives ``-inf``, with derivative 0 when it has two elements or more
    (the first output is ``x[0]`` itself, derivative 1); ``+inf`` gives ``+inf``; NaN
    propagates. The derivative of ``out[i]`` with respect to ``x[j]`` (``j <= i``) is
    ``exp(x[j] - out[i])``, the softmax of the prefix.

    Args:
        x: float array (float16, bfloat16, float32, float64), shape ``S``.
        axis: the scanned axis (negative counts from the end).
        reverse: scan from the end of ``axis``.

    Returns:
        Array of shape ``S`` and ``x``'s dtype.

    Raises:
        BluTypeError: ``x`` is not a real float array. BluValueError: ``axis`` out of range.
    """
    aval = get_aval(x)
    if not dtypes.is_float(aval.dtype):
        raise BluTypeError(
            with_user_line(f"cumlogsumexp: needs a real float operand, got {aval.str_short()}")
        )
    axis = dtypes.static_int(axis, "cumlogsumexp: axis")
    if not -aval.ndim <= axis < aval.ndim:
        raise BluValueError(
            with_user_line(f"cumlogsumexp: axis {axis} out of range for {aval.str_short()}")
        )
    if aval.shape[axis] == 0:
        return x
    return associative_scan(_logaddexp, x, reverse=bool(reverse), axis=axis % aval.ndim)
