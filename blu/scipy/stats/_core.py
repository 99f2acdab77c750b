"""``jax.scipy.stats``'s functions of samples: ``mode``, ``rankdata`` and ``sem`` (JAX's
signatures; ranks and modes from a sort and ``searchsorted`` along the axis)."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from blu import numpy as bnp
from blu.core import dtypes
from blu.core.errors import BluValueError
from blu.scipy.stats._common import as_floats
from blu.transforms.batching import vmap

__all__ = ["ModeResult", "mode", "rankdata", "sem"]

_POLICIES = ("propagate", "omit", "raise")


def _check_policy(fn: str, nan_policy: str) -> None:
    if nan_policy not in _POLICIES:
        raise BluValueError(
            f"{fn}: illegal nan_policy value {nan_policy!r}; expected one of {_POLICIES}"
        )
    if nan_policy != "propagate":
        raise BluValueError(
            f"{fn}: nan_policy={nan_policy!r} is not built (JAX's NotImplementedError): "
            "check for NaNs outside the function"
        )


def _rows(x: Any, axis: int | None) -> tuple[Any, tuple]:
    """``x`` with ``axis`` (all axes for None) moved last and the others flattened:
    ``(rows, shape of the other axes)``."""
    if axis is None:
        return bnp.reshape(x, (1, -1)), ()
    x = bnp.moveaxis(x, axis, -1)
    return bnp.reshape(x, (math.prod(x.shape[:-1]), x.shape[-1])), x.shape[:-1]


def _axis(fn: str, axis: int | None, ndim: int) -> int | None:
    if axis is None:
        return None
    if not -ndim <= axis < ndim:
        raise BluValueError(f"{fn}: axis {axis} is out of bounds for an array of {ndim} dims")
    return axis % ndim


class ModeResult(NamedTuple):
    """``mode``'s result: the most frequent values and their counts."""

    mode: Any
    count: Any


def mode(
    a: Any, axis: int | None = 0, nan_policy: str = "propagate", keepdims: bool = False
) -> ModeResult:
    """The most frequent value along ``axis`` (the smallest of ties, scipy's) and its count;
    NaN and 0 (default float dtype) over an empty axis, as JAX's. ``nan_policy`` is
    ``'propagate'`` only (as JAX's)."""
    _check_policy("mode", nan_policy)
    x = bnp.atleast_1d(bnp.asarray(a))
    axis = _axis("mode", axis, x.ndim)
    rows, rest = _rows(x, axis)
    if keepdims:
        shape = (1,) * x.ndim if axis is None else x.shape[:axis] + (1,) + x.shape[axis + 1 :]
    else:
        shape = rest
    if rows.shape[-1] == 0:
        ft = dtypes.default_float
        return ModeResult(bnp.full(shape, bnp.nan, ft), bnp.zeros(shape, ft))
    s = bnp.sort(rows, axis=-1)
    counts = _count_sorted(s, s)
    best = bnp.argmax(counts, axis=-1, keepdims=True)
    vals = bnp.take_along_axis(s, best, axis=-1)
    cnt = bnp.take_along_axis(counts, best, axis=-1)
    return ModeResult(bnp.reshape(vals, shape), bnp.reshape(cnt, shape))


def _bounds(s: Any, v: Any) -> tuple[Any, Any]:
    """Row by row, how many of the sorted ``s`` are below ``v`` and how many not above it."""
    left = vmap(lambda r, w: bnp.searchsorted(r, w, side="left"))(s, v)
    right = vmap(lambda r, w: bnp.searchsorted(r, w, side="right"))(s, v)
    return left, right


def _count_sorted(s: Any, v: Any) -> Any:
    left, right = _bounds(s, v)
    return right - left


def rankdata(
    a: Any, method: str = "average", *, axis: int | None = None, nan_policy: str = "propagate"
) -> Any:
    """The ranks (from 1) of ``a``'s values, ties by ``method`` (``'average'``, ``'min'``,
    ``'max'``, ``'dense'``, ``'ordinal'``), over the flattened array or along ``axis``; all NaN
    where a row holds a NaN (``nan_policy='propagate'``, the only one built, as JAX's). The
    default float dtype, as JAX's."""
    _check_policy("rankdata", nan_policy)
    if method not in ("average", "min", "max", "dense", "ordinal"):
        raise BluValueError(f"rankdata: unknown method {method!r}")
    x = bnp.asarray(a)
    axis = _axis("rankdata", axis, max(x.ndim, 1))
    if axis is None:
        x = bnp.ravel(x)
        axis = 0
    x = bnp.atleast_1d(x)
    rows, rest = _rows(x, axis)
    ft = dtypes.default_float
    if method == "ordinal":
        order = bnp.argsort(rows, axis=-1, stable=True)
        r = bnp.argsort(order, axis=-1, stable=True) + 1
    else:
        s = bnp.sort(rows, axis=-1)
        left, right = _bounds(s, rows)
        if method == "min":
            r = left + 1
        elif method == "max":
            r = right
        elif method == "average":
            r = 0.5 * (left + 1 + right).astype(ft)
        else:  # dense: the number of distinct values up to this one
            new = bnp.concatenate([bnp.ones_like(s[:, :1], bool), s[:, 1:] != s[:, :-1]], axis=-1)
            dense = bnp.cumsum(new.astype(bnp.int32), axis=-1)
            r = bnp.take_along_axis(dense, left, axis=-1)
    r = bnp.where(bnp.any(bnp.isnan(rows), axis=-1, keepdims=True), bnp.nan, r.astype(ft))
    r = bnp.reshape(r, rest + rows.shape[-1:])
    return bnp.moveaxis(r, -1, axis).astype(ft)


def sem(
    a: Any,
    axis: int | None = 0,
    ddof: int = 1,
    nan_policy: str = "propagate",
    *,
    keepdims: bool = False,
) -> Any:
    """The standard error of the mean, ``std(a, axis, ddof) / sqrt(n)``; with
    ``nan_policy='omit'`` NaNs are left out of both (``'raise'`` is refused, as JAX's)."""
    (b,) = as_floats(a)
    if nan_policy == "propagate":
        size = b.size if axis is None else b.shape[axis]
        return bnp.std(b, axis, ddof=ddof, keepdims=keepdims) / math.sqrt(size)
    if nan_policy == "omit":
        count = bnp.sum(~bnp.isnan(b), axis, keepdims=keepdims)
        sd = bnp.nanstd(b, axis, ddof=ddof, keepdims=keepdims)
        return sd / bnp.sqrt(count.astype(b.dtype))
    raise BluValueError(f"sem: nan_policy={nan_policy!r} is not supported")
