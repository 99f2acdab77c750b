"""Set functions: the standard's ``unique_all`` / ``unique_counts`` / ``unique_inverse`` /
``unique_values``.

One stable sort of the flattened input finds the groups of equal values (a group starts where
an element differs from its sorted predecessor; NaNs differ from everything, so each NaN is
its own group, as the standard asks; -0.0 and +0.0 are one group). The number of groups depends
on the values: without ``size`` the input must be concrete; with a static ``size`` the functions
also work on traced arrays (as JAX's ``unique(size=)``), the missing groups padded with
``fill_value`` (default: the smallest value) and zero counts. ``values`` is a gather of the
input, so it is differentiable. ``_row_groups`` does the same for the slices along an axis
(``unique(axis=)``), sorted lexicographically, each column a key.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from blu import lax
from blu.core import dtypes
from blu.core.interpreter import Tracer, get_aval
from blu.numpy._promote import (
    asarray_operand,
    asarray_operand_in,
    canonicalize_axis,
    concrete_value,
)
from blu.numpy.manipulation import concatenate, moveaxis
from blu.numpy.selection import nonzero, take
from blu.numpy.sorting import argsort

__all__ = ["unique_all", "unique_counts", "unique_inverse", "unique_values"]


class UniqueAllResult(NamedTuple):
    values: Any
    indices: Any
    inverse_indices: Any
    counts: Any


class UniqueCountsResult(NamedTuple):
    values: Any
    counts: Any


class UniqueInverseResult(NamedTuple):
    values: Any
    inverse_indices: Any


def _numbered(starts: Any, perm: Any, n: int, size: int | None):
    """From the sorted elements' group starts (bool ``(n,)``) and the sort's permutation:
    ``(size, group of each sorted element, inverse indices (1-d), present, safe)``, ``present``
    marking which of the ``size`` groups exist and ``safe`` their first sorted positions (0
    where missing). Without ``size`` the starts must be concrete (the number of groups)."""
    i32 = dtypes.int32
    if size is None or not isinstance(starts, Tracer):
        k = int(concrete_value(starts, "unique without size=").sum())
        size = k if size is None else size
    group = lax.sub(lax.cumsum(lax.convert_element_type(starts, i32), 0), lax.full((n,), 1, i32))
    inverse = lax.scatter(
        lax.full((n,), 0, i32), lax.reshape(perm, (n, 1)), group, axes=(0,)
    ) if n else lax.full((0,), 0, i32)  # fmt: skip
    (pos,) = nonzero(starts, size=size, fill_value=n)
    present = lax.lt(pos, lax.full((size,), n, i32))
    safe = lax.select(present, pos, lax.full((size,), 0, i32))
    return size, group, inverse, present, safe


def _groups(x: Any, size: int | None, fill_value: Any, equal_nan: bool = False):
    """(values, first indices, inverse indices (x's shape), counts) of the groups of ``x``;
    with ``equal_nan`` the NaNs (sorted last) are one group."""
    x = asarray_operand(x)
    aval = get_aval(x)
    flat = lax.reshape(x, (aval.size,))
    n = aval.size
    i32 = dtypes.int32
    perm = argsort(flat)  # stable: a group's first sorted element has its smallest index
    srt = take(flat, perm)
    if n:
        hi, lo = lax.slice_in_dim(srt, 1, n), lax.slice_in_dim(srt, 0, n - 1)
        differs = lax.ne(hi, lo)
        if equal_nan and dtypes.is_inexact(aval.dtype):  # NaN != NaN, but here they are one
            both_nan = lax.and_(lax.ne(hi, hi), lax.ne(lo, lo))
            differs = lax.and_(differs, lax.not_(both_nan))
        starts = concatenate([lax.full((1,), True, dtypes.bool_), differs])
    else:
        starts = lax.full((0,), True, dtypes.bool_)
    size, group, inverse, present, safe = _numbered(starts, perm, n, size)
    if n:
        values = take(srt, safe)
        # a missing group's index is the smallest value's (JAX's), so x[first] == values where
        # the padding is the default fill, the smallest value
        first = take(perm, safe)
    else:
        values = lax.full((size,), 0, aval.dtype)
        first = lax.full((size,), 0, i32)
    if size:
        if fill_value is None and n:
            # the smallest value: the first sorted one (a minimum would be NaN, not the
            # smallest number, when there is a NaN, as JAX's)
            fill = lax.reduce_min(flat, (0,)) if not dtypes.is_inexact(aval.dtype) else take(srt, 0)
        else:
            fill = fill_value
        fill = asarray_operand_in(0 if fill is None else fill, aval.dtype)
        fill = lax.convert_element_type(fill, aval.dtype)
        values = lax.select(present, values, lax.broadcast_in_dim(fill, (size,), ()))
    ones = lax.full((n,), 1, i32)
    counts = lax.scatter_add(lax.full((size,), 0, i32), lax.reshape(group, (n, 1)), ones, axes=(0,))
    return values, first, lax.reshape(inverse, aval.shape), counts


def _row_groups(x: Any, axis: Any, size: int | None, fill_value: Any, equal_nan: bool = True):
    """(values (``x``'s distinct slices along ``axis``, sorted lexicographically, at ``axis``),
    first indices, inverse indices (1-d), counts): ``_groups`` for slices."""
    x = asarray_operand(x)
    aval = get_aval(x)
    ax = canonicalize_axis(axis, aval.ndim, "unique")
    moved = moveaxis(x, ax, 0)
    n, rest = aval.shape[ax], get_aval(moved).shape[1:]
    m = math.prod(rest)
    rows = lax.reshape(moved, (n, m))
    i32 = dtypes.int32
    iota = lax.iota(i32, (n,), 0)
    cols = [lax.index_in_dim(rows, j, 1, keepdims=False) for j in range(m)]
    perm = lax.sort((*cols, iota), 0, True, m)[-1] if m else iota  # stable
    srt = take(rows, perm, axis=0)
    if n > 1 and m:
        hi, lo = lax.slice_in_dim(srt, 1, n), lax.slice_in_dim(srt, 0, n - 1)
        differs = lax.ne(hi, lo)
        if equal_nan and dtypes.is_inexact(aval.dtype):
            differs = lax.and_(differs, lax.not_(lax.and_(lax.ne(hi, hi), lax.ne(lo, lo))))
        starts = concatenate([lax.full((1,), True, dtypes.bool_), lax.reduce_or(differs, (1,))])
    else:
        starts = lax.eq(iota, lax.full((n,), 0, i32))  # every row equal (or none, or one)
    size, group, inverse, present, safe = _numbered(starts, perm, n, size)
    if n:
        values = take(srt, safe, axis=0)
        first = take(perm, safe)
        fill = take(srt, 0, axis=0) if fill_value is None else fill_value
    else:
        values = lax.full((size, m), 0, aval.dtype)
        first = lax.full((size,), 0, i32)
        fill = 0 if fill_value is None else fill_value
    fill = lax.convert_element_type(asarray_operand_in(fill, aval.dtype), aval.dtype)
    fill = lax.broadcast_in_dim(fill, (size, m), (1,) if get_aval(fill).ndim else ())
    values = lax.select(lax.broadcast_in_dim(present, (size, m), (0,)), values, fill)
    values = moveaxis(lax.reshape(values, (size, *rest)), 0, ax)
    ones = lax.full((n,), 1, i32)
    counts = lax.scatter_add(lax.full((size,), 0, i32), lax.reshape(group, (n, 1)), ones, axes=(0,))
    return values, first, inverse, counts


def unique_all(x: Any, /, *, size: int | None = None, fill_value: Any = None) -> UniqueAllResult:
    """The sorted unique values of ``x`` (flattened), the index of each one's first occurrence,
    the inverse indices (``values[inverse_indices] == x``, in ``x``'s shape) and the counts
    (indices int32).

    Raises:
        ConcretizationError: ``x`` is traced and ``size`` is None.
    """
    return UniqueAllResult(*_groups(x, size, fill_value))


def unique_counts(
    x: Any, /, *, size: int | None = None, fill_value: Any = None
) -> UniqueCountsResult:
    """The sorted unique values of ``x`` and how often each occurs."""
    values, _, _, counts = _groups(x, size, fill_value)
    return UniqueCountsResult(values, counts)


def unique_inverse(
    x: Any, /, *, size: int | None = None, fill_value: Any = None
) -> UniqueInverseResult:
    """The sorted unique values of ``x`` and the inverse indices (``x``'s shape)."""
    values, _, inverse, _ = _groups(x, size, fill_value)
    return UniqueInverseResult(values, inverse)


def unique_values(x: Any, /, *, size: int | None = None, fill_value: Any = None) -> Any:
    """The sorted unique values of ``x`` (flattened; each NaN counts once)."""
    return _groups(x, size, fill_value)[0]
