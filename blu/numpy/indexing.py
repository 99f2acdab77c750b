"""NumPy indexing: ``x[idx]`` (updates, ``x.at[idx]``, are in ``index_update``).

An index expression is parsed into one entry per indexed axis (``_parse``), following numpy:

- ints (negative count from the end; out of bounds is an IndexError), slices with any step,
  ``None``/``newaxis``, one ``Ellipsis``;
- integer arrays (numpy arrays, lists, blu arrays or tracers): *advanced* indices. They
  broadcast together; the broadcast dimensions replace the indexed axes, at the position of the
  first advanced index when the advanced indices are adjacent and in front otherwise. When an
  advanced index is present, integer scalars count as advanced too (numpy's rule). Negative
  indices count from the end; out-of-bounds indices are clamped (JAX's rule);
- boolean masks given as concrete arrays (their shape is static): ``np.nonzero`` turns them into
  advanced indices; a traced mask raises (its result shape would depend on its values);
- a traced integer scalar: ``lax.dynamic_slice`` (its start is clamped into range).

``getitem`` lowers to ``rev`` + one strided ``slice`` for the basic part, ``dynamic_slice`` for
traced scalars and one ``gather`` for the advanced part, then a reshape/transpose into place.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np

from blu import lax
from blu.core import dtypes
from blu.core.array import Array
from blu.core.errors import (
    BluIndexError,
    BluTypeError,
    ConcretizationError,
    with_user_line,
)
from blu.core.interpreter import Tracer, get_aval
from blu.numpy._promote import array, asarray_operand, broadcast_shapes, broadcast_to
from blu.numpy.selection import _fit_index

__all__ = ["getitem", "BluIndexError"]


def _err(msg: str, shape: tuple[int, ...]) -> BluIndexError:
    return BluIndexError(with_user_line(f"{msg} (indexing an array of shape {shape})"))


# ---- parsing -----------------------------------------------------------------------------------


class _Entry:
    """One item of the expanded index: kind is 'slice', 'int', 'dyn', 'adv', 'none', 'bool0', or
    'ellipsis' (a marker where '...' was written: it covers no axis but separates advanced
    indices)."""

    __slots__ = ("kind", "axis", "start", "step", "count", "value")

    def __init__(self, kind: str, axis: int | None = None, value: Any = None):
        self.kind, self.axis, self.value = kind, axis, value
        self.start = self.step = self.count = 0


def _static_int(v: Any, what: str, shape: tuple[int, ...]) -> int | None:
    if v is None:
        return None
    if isinstance(v, Tracer):
        raise ConcretizationError(
            with_user_line(
                f"{what} must be static, got a traced {v.aval.str_short()}; for a window at a "
                f"traced position use lax.dynamic_slice (indexing an array of shape {shape})"
            )
        )
    try:
        return operator.index(v)
    except TypeError as e:
        raise BluTypeError(with_user_line(f"{what} must be an int or None, got {v!r}")) from e


def _as_index_array(it: Any) -> Any:
    """Lists become numpy arrays (or blu arrays if they hold tracers)."""
    if isinstance(it, (list, tuple)):
        try:
            return np.asarray(it)
        except (ValueError, TypeError):
            return array(it)
    return it


def _parse(idx: Any, shape: tuple[int, ...]) -> list[_Entry]:
    """The expanded index: one entry per index item, every axis of ``shape`` covered."""
    if not isinstance(idx, tuple):
        idx = (idx,)
    items: list[Any] = []
    consumed = 0
    n_ellipsis = 0
    for it in idx:
        if it is None:
            items.append(("none", None))
        elif it is Ellipsis:
            n_ellipsis += 1
            items.append(("ellipsis", None))
        elif isinstance(it, slice):
            items.append(("slice", it))
            consumed += 1
        elif isinstance(it, (bool, np.bool_)):
            items.append(("bool0", bool(it)))
        elif isinstance(it, (int, np.integer)):
            items.append(("int", int(it)))
            consumed += 1
        else:
            it = _as_index_array(it)
            if not isinstance(it, (np.ndarray, Array, Tracer)):
                raise _err(
                    f"only integers, slices, None, Ellipsis and integer or boolean arrays are "
                    f"valid indices, got {type(it).__name__} {it!r:.40}",
                    shape,
                )
            aval = get_aval(it)
            if aval.dtype == dtypes.bool_:
                if isinstance(it, Tracer):
                    raise ConcretizationError(
                        with_user_line(
                            f"a boolean mask {aval.str_short()} that is traced cannot index an "
                            f"array of shape {shape}: the result's shape would depend on its "
                            "values. Use bnp.where(mask, x, 0) (or a fixed-size bnp.nonzero "
                            "of a concrete mask) instead"
                        )
                    )
                mask = np.asarray(it)
                if mask.ndim == 0:
                    items.append(("bool0", bool(mask)))
                else:
                    items.append(("mask", mask))
                    consumed += mask.ndim
            elif dtypes.is_int(aval.dtype):
                if aval.ndim == 0 and not isinstance(it, Tracer):
                    items.append(("int", int(np.asarray(it))))
                elif aval.ndim == 0:
                    items.append(("dyn", it))
                else:
                    items.append(("adv", it))
                consumed += 1
            else:
                raise _err(
                    f"arrays used as indices must be integer or bool, got {aval.dtype}", shape
                )
    if n_ellipsis > 1:
        raise _err("an index can only have a single ellipsis ('...')", shape)
    if consumed > len(shape):
        raise _err(f"too many indices: {consumed} for {len(shape)} dimensions", shape)
    if not n_ellipsis:
        items.append(("ellipsis", "implicit"))

    entries: list[_Entry] = []
    axis = 0
    for kind, v in items:
        if kind == "ellipsis":
            for _ in range(len(shape) - consumed):
                entries.append(_slice_entry(slice(None), axis, shape))
                axis += 1
            if v is None:  # a written '...' separates advanced indices (numpy), even if empty
                entries.append(_Entry("ellipsis"))
        elif kind in ("none", "bool0"):
            entries.append(_Entry(kind, None, v))
        elif kind == "slice":
            entries.append(_slice_entry(v, axis, shape))
            axis += 1
        elif kind == "int":
            n = shape[axis]
            if not -n <= v < n:
                raise _err(f"index {v} is out of bounds for axis {axis} with size {n}", shape)
            entries.append(_Entry("int", axis, v % n))
            axis += 1
        elif kind == "mask":
            k = v.ndim
            if v.shape != shape[axis : axis + k]:
                raise _err(
                    f"boolean index of shape {v.shape} does not match the indexed dimensions "
                    f"{shape[axis : axis + k]}",
                    shape,
                )
            for nz in np.nonzero(v):
                entries.append(_Entry("adv", axis, nz))
                axis += 1
        else:  # 'adv', 'dyn'
            entries.append(_Entry(kind, axis, v))
            axis += 1
    if any(e.kind == "adv" for e in entries):
        # with an advanced index present, integer scalars are advanced indices too
        for e in entries:
            if e.kind == "int":
                e.kind, e.value = "adv", np.asarray(e.value)
            elif e.kind == "dyn":
                e.kind = "adv"
    return entries


def _slice_entry(s: slice, axis: int, shape: tuple[int, ...]) -> _Entry:
    n = shape[axis]
    start = _static_int(s.start, "slice start", shape)
    stop = _static_int(s.stop, "slice stop", shape)
    step = _static_int(s.step, "slice step", shape)
    if step == 0:
        raise _err("slice step cannot be zero", shape)
    e = _Entry("slice", axis)
    e.start, stop, e.step = slice(start, stop, step).indices(n)
    e.count = len(range(e.start, stop, e.step))
    return e


# ---- shared helpers ----------------------------------------------------------------------------


def _index_dtype(shape: tuple[int, ...]) -> np.dtype:
    return dtypes.int64 if math.prod(shape) >= 2**31 - 1 else dtypes.int32


def _normalized(arr: Any, n: int, dt: np.dtype) -> Any:
    """Negative indices counted from the end, as ``dt`` (numpy in, numpy out); indices of a
    wider dtype than ``dt`` are clamped first (``_fit_index``), so out of bounds stays out."""
    arr = _fit_index(arr, n, dt)
    if isinstance(arr, np.ndarray):
        a = arr.astype(np.int64)
        return np.where(a < 0, a + n, a).astype(dt)
    a = lax.convert_element_type(arr, dt)
    zero = lax.full(get_aval(a).shape, 0, dt)
    return lax.select(lax.lt(a, zero), lax.add(a, lax.full_like(a, n)), a)


def _adv_arrays(entries: list[_Entry], shape: tuple[int, ...], dt: np.dtype):
    """The advanced entries' index arrays, normalized and broadcast to their common shape."""
    adv = [e for e in entries if e.kind == "adv"]
    arrs = [
        _normalized(
            e.value if isinstance(e.value, np.ndarray) else asarray_operand(e.value),
            shape[e.axis],
            dt,
        )
        for e in adv
    ]
    bshape = broadcast_shapes(*[get_aval(a).shape for a in arrs])
    arrs = [
        np.broadcast_to(a, bshape) if isinstance(a, np.ndarray) else broadcast_to(a, bshape)
        for a in arrs
    ]
    return adv, arrs, bshape


def _adv_bshape(entries: list[_Entry]) -> tuple[int, ...]:
    """The broadcast shape of the advanced indices (without computing them)."""
    return broadcast_shapes(*[get_aval(e.value).shape for e in entries if e.kind == "adv"])


def _adv_position(entries: list[_Entry]) -> int:
    """Where the advanced dimensions go among the non-advanced output dimensions."""
    pos = [i for i, e in enumerate(entries) if e.kind == "adv"]
    if pos != list(range(pos[0], pos[-1] + 1)):
        return 0
    return sum(1 for e in entries[: pos[0]] if e.kind in ("slice", "none", "bool0"))


def _basic_dims(entries: list[_Entry]) -> list[int]:
    """Output sizes of the non-advanced entries that make a dimension, in order."""
    out = []
    for e in entries:
        if e.kind == "slice":
            out.append(e.count)
        elif e.kind in ("none", "bool0"):
            out.append(1 if e.kind == "none" or e.value else 0)
    return out


def _result_shape(entries: list[_Entry], bshape: tuple[int, ...]) -> tuple[int, ...]:
    dims = _basic_dims(entries)
    if not any(e.kind == "adv" for e in entries):
        return tuple(dims)
    p = _adv_position(entries)
    return tuple(dims[:p]) + tuple(bshape) + tuple(dims[p:])


# ---- getitem -----------------------------------------------------------------------------------


def getitem(x: Any, idx: Any) -> Any:
    """``x[idx]`` with numpy's indexing rules (see the module docstring).

    Raises:
        BluIndexError: an int out of bounds, too many indices, a mask of the wrong shape, or an
            invalid index type. ConcretizationError: a traced boolean mask or slice bound.
    """
    x = asarray_operand(x)
    shape = get_aval(x).shape
    entries = _parse(idx, shape)
    nd = len(shape)

    # the basic part: reverse negative-step axes, then one strided slice
    starts, limits, strides, rev = [0] * nd, list(shape), [1] * nd, []
    for e in entries:
        if e.kind == "slice":
            n, start, step = shape[e.axis], e.start, e.step
            if step < 0:
                rev.append(e.axis)
                start, step = n - 1 - start, -step
            starts[e.axis], strides[e.axis] = start, step
            limits[e.axis] = start + (e.count - 1) * step + 1 if e.count else start
        elif e.kind == "int":
            starts[e.axis], limits[e.axis] = e.value, e.value + 1
    if rev:
        x = lax.rev(x, tuple(rev))
    x = lax.slice(x, starts, limits, strides)

    dyn = [e for e in entries if e.kind == "dyn"]
    if dyn:
        cur = get_aval(x).shape
        dstarts: list[Any] = [0] * nd
        sizes = list(cur)
        for e in dyn:
            dstarts[e.axis] = _normalized(asarray_operand(e.value), cur[e.axis], dtypes.int32)
            sizes[e.axis] = 1
        x = lax.dynamic_slice(x, dstarts, sizes, allow_negative_indices=False)

    if any(e.kind == "bool0" and not e.value for e in entries):
        return lax.full(_result_shape(entries, _adv_bshape(entries)), 0, get_aval(x).dtype)

    if not any(e.kind == "adv" for e in entries):
        return lax.reshape(x, tuple(_basic_dims(entries)))

    adv, arrs, bshape = _adv_arrays(entries, shape, _index_dtype(shape))
    if all(isinstance(a, np.ndarray) for a in arrs):
        ind = np.stack(arrs, -1) if arrs[0].size else np.zeros(bshape + (len(arrs),), arrs[0].dtype)
    else:
        ind = lax.concatenate(
            [lax.reshape(asarray_operand(a), bshape + (1,)) for a in arrs], len(bshape)
        )
    x = lax.gather(x, ind, axes=tuple(e.axis for e in adv), mode="clip")
    # x is now bshape + [slice dims in order]; put the None dims in, then the advanced block
    nb = len(bshape)
    dims = _basic_dims(entries)
    x = lax.reshape(x, tuple(bshape) + tuple(dims))
    p = _adv_position(entries)
    perm = list(range(nb, nb + p)) + list(range(nb)) + list(range(nb + p, nb + len(dims)))
    return lax.transpose(x, tuple(perm))
