"""Sorting and searching: sort, argsort (stable; optional descending), partition and
argpartition (a full sort, which partitions at every ``kth``), searchsorted.

``lax.top_k`` is the fast path for the k largest elements.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np

from blu import lax
from blu.core import dtypes
from blu.core.errors import BluShapeError, BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import Tracer, get_aval
from blu.numpy._promote import (
    asarray_operand,
    canonicalize_axis,
    concrete_value,
    promote_dtypes,
)
from blu.numpy.logic import logical_and, logical_not, logical_or
from blu.numpy.selection import take
from blu.numpy.ufuncs import _where

__all__ = ["sort", "argsort", "partition", "argpartition", "searchsorted", "sort_complex"]


def _prep(a: Any, axis: Any, name: str) -> tuple[Any, int]:
    a = asarray_operand(a)
    if axis is None:
        return lax.reshape(a, (get_aval(a).size,)), 0
    if get_aval(a).ndim == 0:
        raise BluShapeError(with_user_line(f"{name}: cannot sort a 0-d array along an axis"))
    return a, canonicalize_axis(axis, get_aval(a).ndim, name)


def sort(
    a: Any,
    axis: int | None = -1,
    *,
    kind: Any = None,
    order: Any = None,
    stable: bool = True,
    descending: bool = False,
) -> Any:
    """Sorted copy along ``axis`` (the raveled array when None); NaN sorts last, as numpy.
    Differentiable (the tangent follows the permutation)."""
    if order is not None:
        raise BluValueError(with_user_line("sort: order= (structured arrays) is not supported"))
    a, ax = _prep(a, axis, "sort")
    out = lax.sort(a, ax)
    return lax.rev(out, (ax,)) if descending else out


def sort_complex(a: Any) -> Any:
    """Sorted copy along the last axis as a complex array (numpy's and JAX's ``sort_complex``):
    real part first, then imaginary part. The dtype is JAX's: complex128 for float64 and
    complex128 inputs, complex64 for every other (integer, bool, narrower float) input.

    Raises:
        BluShapeError: a 0-d ``a``.
    """
    a, ax = _prep(a, -1, "sort_complex")
    out = lax.sort(a, ax)
    dt = get_aval(out).dtype
    return lax.convert_element_type(out, dtypes.complex_dtype(dt))


def argsort(
    a: Any,
    axis: int | None = -1,
    *,
    kind: Any = None,
    order: Any = None,
    stable: bool = True,
    descending: bool = False,
) -> Any:
    """Indices that sort ``a`` along ``axis`` (int32); always stable: equal elements keep their
    order (also with ``descending``)."""
    if order is not None:
        raise BluValueError(with_user_line("argsort: order= is not supported"))
    a, ax = _prep(a, axis, "argsort")
    shape = get_aval(a).shape
    n = shape[ax]
    iota = lax.iota(dtypes.int32, shape, ax)
    if not descending:
        return lax.sort((a, iota), ax, True, 1)[1]
    # a stable descending order: sort the reversed array ascending, read it backwards, and map
    # the indices back (ties then come out in increasing original index)
    idx = lax.sort((lax.rev(a, (ax,)), iota), ax, True, 1)[1]
    return lax.sub(lax.full(shape, n - 1, dtypes.int32), lax.rev(idx, (ax,)))


def _check_kth(kth: Any, a: Any, ax: int, name: str) -> None:
    """``kth`` (a static int, or numpy's sequence of them) within ``[-n, n)`` of axis ``ax``.

    Raises:
        ConcretizationError: a traced ``kth``. BluTypeError: not integers.
        BluValueError: out of range.
    """
    if isinstance(kth, Tracer):
        concrete_value(kth, f"{name} (kth)")
    ks = np.asarray(kth)
    if ks.dtype.kind not in "iu" or ks.ndim > 1:
        raise BluTypeError(
            with_user_line(f"{name}: kth must be an int or a 1-d sequence of ints, got {kth!r}")
        )
    shape = get_aval(a).shape
    n = shape[ax]
    for k in ks.reshape(-1):
        if not -n <= operator.index(k) < n:
            raise BluValueError(
                with_user_line(
                    f"{name}: kth={int(k)} is out of bounds for axis {ax} of size {n} "
                    f"(an array of shape {shape})"
                )
            )


def partition(a: Any, kth: Any, axis: int | None = -1) -> Any:
    """A copy of ``a`` with the ``kth`` element along ``axis`` where a sort would put it,
    every smaller element before it and every larger one after it (``jax.numpy.partition``;
    ``axis=None`` partitions the raveled array, as numpy).

    ``kth`` is a static int (or a sequence of them, as numpy), negative counting from the end.
    The order within the two parts is unspecified: blu sorts the whole axis (a stable sort,
    NaN last), which satisfies every ``kth``. Differentiable (the tangent follows the
    permutation), any dtype.

    Raises:
        BluValueError: ``kth`` is outside ``[-n, n)``. BluTypeError: ``kth`` is not integer.
        ConcretizationError: a traced ``kth``. BluAxisError: ``axis`` out of range.
        BluShapeError: a 0-d ``a`` with an axis.
    """
    a, ax = _prep(a, axis, "partition")
    _check_kth(kth, a, ax, "partition")
    return lax.sort(a, ax)


def argpartition(a: Any, kth: Any, axis: int | None = -1) -> Any:
    """Indices (int32) that partition ``a`` along ``axis`` at ``kth`` (``jax.numpy.argpartition``):
    ``take_along_axis(a, argpartition(a, kth, axis), axis)`` is a :func:`partition`. blu
    returns the stable :func:`argsort`, which is such indices for every ``kth``.

    Raises:
        as :func:`partition`.
    """
    a, ax = _prep(a, axis, "argpartition")
    _check_kth(kth, a, ax, "argpartition")
    return argsort(a, ax)


def searchsorted(
    a: Any, v: Any, side: str = "left", sorter: Any = None, *, method: str = "scan"
) -> Any:
    """Insertion points of ``v`` into the sorted 1-D ``a`` keeping it sorted (int32): the first
    index ``i`` with ``v <= a[i]`` ('left') or ``v < a[i]`` ('right').

    Floating NaN is ordered as :func:`sort` puts it, after every number and equal to itself
    (NumPy's and JAX's order): a NaN query goes after the numbers, before or after ``a``'s NaNs
    by ``side``.

    An unrolled binary search of ``ceil(log2(n + 1))`` steps of gather and compare, whatever
    JAX ``method`` ('scan', 'scan_unrolled', 'sort', 'compare_all') is named.

    Raises:
        BluValueError: an unknown ``side`` or ``method``.
    """
    if method not in ("scan", "scan_unrolled", "sort", "compare_all"):
        raise BluValueError(
            with_user_line(
                f"searchsorted: method must be 'scan', 'scan_unrolled', 'sort' or "
                f"'compare_all', got {method!r}"
            )
        )
    if side not in ("left", "right"):
        raise BluValueError(
            with_user_line(f"searchsorted: side must be 'left' or 'right', got {side!r}")
        )
    a = asarray_operand(a)
    if get_aval(a).ndim != 1:
        raise BluShapeError(
            with_user_line(f"searchsorted: a must be 1-D, got {get_aval(a).str_short()}")
        )
    if sorter is not None:
        a = take(a, sorter)
    adt = get_aval(a).dtype
    if type(v) is int and dtypes.is_int(adt) and not np.iinfo(adt).min <= v <= np.iinfo(adt).max:
        # past the dtype's range, so before or after every element (numpy's; no cast can wrap
        # it to a value in range)
        return lax.full((), 0 if v < 0 else get_aval(a).shape[0], dtypes.int32)
    a, v = promote_dtypes(a, v)
    n = get_aval(a).shape[0]
    vshape = get_aval(v).shape
    nan_last = dtypes.is_float(get_aval(a).dtype)
    lo = lax.full(vshape, 0, dtypes.int32)
    hi = lax.full(vshape, n, dtypes.int32)
    if n == 0:
        return lo
    for _ in range(math.ceil(math.log2(n + 1))):
        mid = lax.div(lax.add(lo, hi), lax.full(vshape, 2, dtypes.int32))
        am = take(a, mid, mode="clip")
        right = _before(am, v, side, nan_last)
        active = lax.lt(lo, hi)
        lo = _where(logical_and(active, right), lax.add(mid, lax.full(vshape, 1, dtypes.int32)), lo)
        hi = _where(logical_and(active, logical_not(right)), mid, hi)
    return lo


def _before(am: Any, v: Any, side: str, nan_last: bool) -> Any:
    """Whether ``v`` goes after ``am`` ('left': ``am < v``; 'right': ``am <= v``), NaN after
    every number and equal to NaN where ``nan_last``."""
    if not nan_last:
        return lax.lt(am, v) if side == "left" else lax.le(am, v)
    v_nan = lax.ne(v, v)
    if side == "left":  # a number before a NaN query
        return logical_or(lax.lt(am, v), logical_and(v_nan, lax.eq(am, am)))
    return logical_or(lax.le(am, v), v_nan)  # everything up to a NaN query's NaNs
