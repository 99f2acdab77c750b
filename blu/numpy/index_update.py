"""Functional updates: ``x.at[idx].set(v)``, ``.add``, ``.multiply``, ``.min``, ``.max``, ``.get``.

The index is parsed as for ``getitem`` (``blu.numpy.indexing``). With only unit-step slices, ints
and traced scalars, an update is one ``dynamic_update_slice`` of a window; otherwise each
element of ``x[idx]`` gets its flat position in ``x`` and the update is a ``scatter`` /
``scatter_add`` on the raveled array. As in JAX, updates at out-of-bounds advanced indices (and
out-of-range traced scalars) are dropped, and repeated indices accumulate for ``add``,
``multiply``, ``min`` and ``max`` (``set`` keeps one of the values).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from blu import lax
from blu.core import dtypes
from blu.core.errors import BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.lax.scatter_combine import combine_identity
from blu.numpy._promote import asarray_operand, asarray_operand_in, broadcast_to, scalar_array
from blu.numpy.indexing import (
    _adv_arrays,
    _adv_bshape,
    _adv_position,
    _basic_dims,
    _Entry,
    _index_dtype,
    _normalized,
    _parse,
    _result_shape,
    getitem,
)
from blu.numpy.logic import greater_equal, less, logical_and, logical_or, not_equal
from blu.numpy.selection import _index_array, _normalize_index, default_fill, take
from blu.numpy.ufuncs import (
    _where,
    add,
    maximum,
    minimum,
    multiply,
    negative,
    power,
    reciprocal,
    true_divide,
)

__all__ = ["IndexUpdateHelper", "IndexUpdateRef"]


# ---- updates -----------------------------------------------------------------------------------


class IndexUpdateHelper:
    """``x.at``: ``x.at[idx]`` gives an ``IndexUpdateRef`` (JAX's functional updates)."""

    __slots__ = ("array",)

    def __init__(self, array: Any):
        self.array = array

    def __getitem__(self, idx: Any) -> IndexUpdateRef:
        return IndexUpdateRef(self.array, idx)

    def __repr__(self) -> str:
        return f"IndexUpdateHelper({self.array!r})"


class IndexUpdateRef:
    """``x.at[idx]``: each method returns a new array (``x`` is never modified).

    The update values are cast to ``x``'s dtype and broadcast to the shape of ``x[idx]``.
    Updates at out-of-bounds advanced indices are dropped; repeated indices accumulate for
    add/multiply/min/max (like ``np.add.at``), and for ``set`` one of the values is kept.
    """

    __slots__ = ("array", "index")

    def __init__(self, array: Any, index: Any):
        self.array, self.index = array, index

    def get(
        self,
        *,
        mode: str | None = None,
        fill_value: Any = None,
        indices_are_sorted: bool = False,
        unique_indices: bool = False,
    ) -> Any:
        """``x[idx]``.

        Args:
            mode: None, 'clip' or 'promise_in_bounds' (out-of-bounds indices are clamped), or
                'fill' / 'drop' (out-of-bounds integers and integer-array indices read
                ``fill_value``; only for an index made of them and full slices).
            fill_value: with 'fill': the value read out of bounds; default NaN for floats, the
                most negative value for signed ints, the largest for unsigned, True for bool
                (as JAX).
            indices_are_sorted, unique_indices: hints that never change the result.

        Raises:
            BluValueError: an unknown mode, or ``fill_value`` without mode 'fill'.
        """
        mode = _check_mode("get", mode, ("clip", "fill", "drop", "promise_in_bounds"))
        if fill_value is not None and mode not in ("fill", "drop"):
            raise BluValueError(with_user_line("at[].get: fill_value needs mode='fill'"))
        if mode in ("fill", "drop"):
            return _get_fill(self.array, self.index, fill_value)
        return getitem(self.array, self.index)

    def _scalar(self, values: Any) -> Any:
        """A Python scalar (weakly typed) as a 0-d array of ``x``'s dtype when that is wider than
        the scalar's default, made from the Python value itself (as JAX: 0.1 into a float64
        array is float64's 0.1, not float32's); other values pass through."""
        if type(values) not in (int, float, complex):
            return values
        dtype = get_aval(asarray_operand(self.array)).dtype
        d, _ = dtypes.dtype_and_weak(values)
        # only where x's dtype is wider than the scalar's default (float64, int64, complex128):
        # narrower ones convert the default as before (the same jaxprs, the same kernels)
        if not np.can_cast(d, dtype, "same_kind") or np.dtype(dtype).itemsize <= d.itemsize:
            return values
        return scalar_array(values, dtype, False)

    def _do(self, values: Any, op: str, mode: str | None) -> Any:
        values = self._scalar(values)
        mode = _check_mode(op, mode, ("drop", "fill", "clip", "promise_in_bounds"))
        idx = _clip_index(self.array, self.index) if mode == "clip" else self.index
        if mode in ("drop", "fill"):
            in_bounds, oob = _without_static_oob(self.array, idx)
            if oob:  # every updated element is out of bounds: all dropped (JAX's)
                _update(self.array, in_bounds, values, op)  # (the values' shape still checked)
                return asarray_operand(self.array)
        return _update(self.array, idx, values, op)

    # ``indices_are_sorted`` / ``unique_indices`` are accepted as hints: they never change the
    # result (with repeated indices the result is as documented whatever the hint says).
    def set(self, values: Any, *, mode: str | None = None, indices_are_sorted: bool = False,
            unique_indices: bool = False) -> Any:  # fmt: skip
        """``x`` with ``x[idx] = values``; ``mode``: None/'drop'/'fill'/'promise_in_bounds'
        (out-of-bounds integer-array indices are dropped; with 'drop'/'fill' out-of-bounds
        Python ints too) or 'clip' (clamped into range)."""
        return self._do(values, "set", mode)

    def add(self, values: Any, *, mode: str | None = None, indices_are_sorted: bool = False,
            unique_indices: bool = False) -> Any:  # fmt: skip
        """``x`` with ``x[idx] += values`` (repeated indices accumulate); ``mode`` as for set."""
        return self._do(values, "add", mode)

    def subtract(self, values: Any, *, mode: str | None = None, indices_are_sorted: bool = False,
                 unique_indices: bool = False) -> Any:  # fmt: skip
        """``x`` with ``x[idx] -= values``; ``mode`` as for set."""
        return self._do(negative(self._scalar(values)), "add", mode)

    def multiply(self, values: Any, *, mode: str | None = None, indices_are_sorted: bool = False,
                 unique_indices: bool = False) -> Any:  # fmt: skip
        """``x`` with ``x[idx] *= values`` (repeated indices multiply in every value)."""
        return self._do(values, "mul", mode)

    mul = multiply

    def divide(self, values: Any, *, mode: str | None = None, indices_are_sorted: bool = False,
               unique_indices: bool = False) -> Any:  # fmt: skip
        """``x`` with ``x[idx] /= values``. For an integer or bool ``x`` this is JAX's
        ``x / ones_like(x).at[idx].multiply(values)``, a float array (the reciprocal of an
        integer would be 0)."""
        x = asarray_operand(self.array)
        if not dtypes.is_inexact(get_aval(x).dtype):
            ones = lax.full_like(x, 1)
            return true_divide(x, IndexUpdateRef(ones, self.index)._do(values, "mul", mode))
        return self._do(reciprocal(self._scalar(values)), "mul", mode)

    def power(self, values: Any, *, mode: str | None = None, indices_are_sorted: bool = False,
              unique_indices: bool = False) -> Any:  # fmt: skip
        """``x`` with ``x[idx] **= values``; a repeated index takes one of its values (as
        ``set``), not their product."""
        base = self.get(mode="clip" if mode == "clip" else None)
        return self._do(power(base, values), "set", mode)

    def apply(self, func: Any, *, mode: str | None = None, indices_are_sorted: bool = False,
              unique_indices: bool = False) -> Any:  # fmt: skip
        """``x`` with ``x[idx] = func(x[idx])`` for an elementwise (unary) ``func``; applied
        once per element, a repeated index too."""
        base = self.get(mode="clip" if mode == "clip" else None)
        return self._do(func(base), "set", mode)

    def min(self, values: Any, *, mode: str | None = None, indices_are_sorted: bool = False,
            unique_indices: bool = False) -> Any:  # fmt: skip
        """``x`` with ``x[idx] = minimum(x[idx], values)``."""
        return self._do(values, "min", mode)

    def max(self, values: Any, *, mode: str | None = None, indices_are_sorted: bool = False,
            unique_indices: bool = False) -> Any:  # fmt: skip
        """``x`` with ``x[idx] = maximum(x[idx], values)``."""
        return self._do(values, "max", mode)

    def __repr__(self) -> str:
        return f"IndexUpdateRef({self.array!r}, {self.index!r})"


def _check_mode(op: str, mode: Any, allowed: tuple[str, ...]) -> str | None:
    if mode is not None and mode not in allowed:
        raise BluValueError(
            with_user_line(f"at[].{op}: unknown mode {mode!r} (expected one of {allowed})")
        )
    return mode


def _index_entries(x: Any, idx: Any, op: str) -> tuple[list, list[int]]:
    """The index as a tuple of per-axis entries, for the modes that need each axis' size: only
    integers, integer arrays and slices (one entry per leading axis)."""
    entries = list(idx) if isinstance(idx, tuple) else [idx]
    shape = get_aval(x).shape
    if len(entries) > len(shape) or any(
        e is None or e is Ellipsis or (hasattr(e, "dtype") and e.dtype == np.bool_) for e in entries
    ):
        raise BluValueError(
            with_user_line(
                f"at[].{op}: this mode takes an index of integers, integer arrays and slices "
                f"(one per leading axis), got {idx!r}"
            )
        )
    return entries, list(shape)


def _is_int_index(e: Any) -> bool:
    return not isinstance(e, slice)


def _clip_index(x: Any, idx: Any) -> Any:
    """``idx`` with each integer (array) entry normalized (negative from the end) and clamped
    into ``[0, n - 1]``: JAX's mode='clip' for updates."""
    entries, shape = _index_entries(x, idx, "update")
    out = []
    for e, n in zip(entries, shape):
        if _is_int_index(e):
            i = _normalize_index(_index_array(e, "at[]", n), n)
            if isinstance(i, np.ndarray):
                i = np.clip(i, 0, max(n - 1, 0))
            else:
                i = lax.min(lax.max(i, lax.full_like(i, 0)), lax.full_like(i, max(n - 1, 0)))
            e = i
        out.append(e)
    return tuple(out)


def _without_static_oob(x: Any, idx: Any) -> tuple[Any, bool]:
    """``(idx with each out-of-bounds Python integer entry made 0, whether there was one)``, for
    an index of integers, integer arrays and slices (one per leading axis); else ``(idx,
    False)``. The modes 'drop' and 'fill' read such an entry as every element out of bounds."""
    entries = list(idx) if isinstance(idx, tuple) else [idx]
    shape = get_aval(x).shape
    plain = all(
        isinstance(e, (int, np.integer, slice))
        and not isinstance(e, (bool, np.bool_))
        or (hasattr(e, "dtype") and np.dtype(e.dtype).kind in "iu")
        for e in entries
    )
    if not plain or len(entries) > len(shape):
        return idx, False
    out, oob = [], False
    for e, n in zip(entries, shape):
        if isinstance(e, (int, np.integer)) and n and not -n <= int(e) < n:
            e, oob = 0, True
        out.append(e)
    return (tuple(out), True) if oob else (idx, False)


def _get_fill(x: Any, idx: Any, fill_value: Any) -> Any:
    """``x[idx]`` where the rows with an out-of-bounds integer index read ``fill_value``."""
    x = asarray_operand(x)
    entries, shape = _index_entries(x, idx, "get")
    bad = None
    for e, n in zip(entries, shape):
        if _is_int_index(e):
            i = _index_array(e, "at[].get", n)
            b = logical_or(less(i, -n), greater_equal(i, n))
            bad = b if bad is None else logical_or(bad, b)
    out = getitem(x, _without_static_oob(x, idx)[0])
    if bad is None:
        return out
    dtype = get_aval(x).dtype
    fill = np.asarray(default_fill(dtype), dtype) if fill_value is None else fill_value
    fill = lax.convert_element_type(asarray_operand_in(fill, dtype), dtype)
    # numpy's placement of the advanced-index dims: where the (contiguous) integer entries
    # are, else first
    ints = [k for k, e in enumerate(entries) if _is_int_index(e)]
    start = ints[0] if ints == list(range(ints[0], ints[-1] + 1)) else 0
    bad = asarray_operand(bad)
    nb = get_aval(bad).ndim
    out_shape = get_aval(out).shape
    bad = lax.broadcast_in_dim(bad, out_shape, tuple(range(start, start + nb)))
    return _where(bad, fill, out)


def _combine(op: str, old: Any, new: Any) -> Any:
    if op == "set":
        return new
    if op == "add":
        return add(old, new)
    if op == "mul":
        return multiply(old, new)
    return minimum(old, new) if op == "min" else maximum(old, new)


def _values_for(x_aval: Any, values: Any, out_shape: tuple[int, ...]) -> Any:
    v = lax.convert_element_type(asarray_operand(values), x_aval.dtype)
    vs = get_aval(v).shape
    while len(vs) > len(out_shape) and vs[0] == 1:  # numpy drops leading size-1 axes here
        vs = vs[1:]
        v = lax.reshape(v, vs)
    return broadcast_to(v, out_shape)


def _update(x: Any, idx: Any, values: Any, op: str) -> Any:
    x = asarray_operand(x)
    aval = get_aval(x)
    shape = aval.shape
    entries = _parse(idx, shape)
    has_adv = any(e.kind == "adv" for e in entries)
    bshape = _adv_bshape(entries)
    out_shape = _result_shape(entries, bshape)
    v = _values_for(aval, values, out_shape)
    if math.prod(out_shape) == 0:
        return x
    simple = not has_adv and all(
        e.kind in ("int", "dyn", "none", "ellipsis") or (e.kind == "slice" and e.step == 1)
        for e in entries
    )
    if simple:
        return _update_window(x, entries, v, op)
    return _update_scatter(x, entries, v, op, out_shape)


def _update_window(x: Any, entries: list[_Entry], v: Any, op: str) -> Any:
    """Unit-step slices, ints and traced scalars: a dynamic_update_slice of one window."""
    shape = get_aval(x).shape
    starts: list[Any] = [0] * len(shape)
    sizes = list(shape)
    valid = None
    for e in entries:
        if e.kind == "slice":
            starts[e.axis], sizes[e.axis] = e.start, e.count
        elif e.kind == "int":
            starts[e.axis], sizes[e.axis] = e.value, 1
        elif e.kind == "dyn":
            i = _normalized(asarray_operand(e.value), shape[e.axis], dtypes.int32)
            ok = logical_and(greater_equal(i, 0), less(i, shape[e.axis]))
            valid = ok if valid is None else logical_and(valid, ok)
            starts[e.axis], sizes[e.axis] = i, 1
    v = lax.reshape(v, tuple(sizes))
    if op != "set":
        v = _combine(op, lax.dynamic_slice(x, starts, sizes, allow_negative_indices=False), v)
    out = lax.dynamic_update_slice(x, v, starts, allow_negative_indices=False)
    if valid is not None:  # out-of-bounds traced scalars drop the update, as scatters do
        out = _where(valid, out, x)
    return out


def _flat_positions(entries: list[_Entry], shape: tuple[int, ...], out_shape: tuple[int, ...]):
    """For each element of ``x[idx]``, its position in ``ravel(x)``; ``size(x)`` where an
    advanced index or a traced scalar is out of bounds (so the scatter drops it). Static parts
    are computed with numpy (constants), traced ones with blu operations."""
    dt = _index_dtype(shape)
    size = math.prod(shape)
    row_strides = [math.prod(shape[i + 1 :]) for i in range(len(shape))]
    nd_out = len(out_shape)
    has_adv = any(e.kind == "adv" for e in entries)
    p = _adv_position(entries) if has_adv else 0
    n_adv_dims = nd_out - len(_basic_dims(entries))
    out_dim, k = {}, 0  # the output dimension of each basic entry
    for j, e in enumerate(entries):
        if e.kind in ("slice", "none", "bool0"):
            if has_adv and k == p:
                k += n_adv_dims
            out_dim[j] = k
            k += 1
    static = np.zeros((1,) * nd_out, np.int64)
    static_ok = np.ones((1,) * nd_out, bool)
    traced: Any = None
    valid: Any = None

    def add_traced(t: Any, ok: Any) -> None:
        nonlocal traced, valid
        traced = t if traced is None else add(traced, t)
        valid = ok if valid is None else logical_and(valid, ok)

    for j, e in enumerate(entries):
        if e.kind == "slice":
            r = (e.start + e.step * np.arange(e.count, dtype=np.int64)) * row_strides[e.axis]
            s = [1] * nd_out
            s[out_dim[j]] = e.count
            static = static + r.reshape(s)
        elif e.kind == "int":
            static = static + e.value * row_strides[e.axis]
        elif e.kind == "dyn":
            i = _normalized(asarray_operand(e.value), shape[e.axis], dt)
            ok = logical_and(greater_equal(i, 0), less(i, shape[e.axis]))
            add_traced(multiply(i, row_strides[e.axis]), ok)
    if has_adv:
        adv, arrs, bshape = _adv_arrays(entries, shape, dt)
        s = (1,) * p + tuple(bshape) + (1,) * (nd_out - p - len(bshape))
        for e, a in zip(adv, arrs):
            n = shape[e.axis]
            if isinstance(a, np.ndarray):
                a = a.reshape(s).astype(np.int64)
                static_ok = static_ok & (a >= 0) & (a < n)
                static = static + a * row_strides[e.axis]
            else:
                a = lax.reshape(a, s)
                ok = logical_and(greater_equal(a, 0), less(a, n))
                add_traced(multiply(a, row_strides[e.axis]), ok)
    static = np.where(static_ok, static, size)
    static = np.broadcast_to(static, out_shape).astype(dt)
    if traced is None:
        return static
    pos = add(broadcast_to(asarray_operand(traced), out_shape), static)
    ok = logical_and(broadcast_to(valid, out_shape), np.broadcast_to(static_ok, out_shape))
    return _where(ok, pos, size)


def _update_scatter(x: Any, entries: list[_Entry], v: Any, op: str, out_shape) -> Any:
    shape = get_aval(x).shape
    size = math.prod(shape)
    pos = _flat_positions(entries, shape, out_shape)
    flat = lax.reshape(x, (size,))
    n_upd = math.prod(out_shape)
    pos = pos.reshape(n_upd) if isinstance(pos, np.ndarray) else lax.reshape(pos, (n_upd,))
    v = lax.reshape(v, (n_upd,))
    if op == "set":
        out = lax.scatter(flat, _col(pos), v, axes=(0,), mode="drop")
    elif op == "add":
        out = lax.scatter_add(flat, _col(pos), v, axes=(0,), mode="drop")
    else:
        out = _scatter_combine(flat, pos, v, op)
    return lax.reshape(out, shape)


def _col(pos: Any) -> Any:
    if isinstance(pos, np.ndarray):
        return pos.reshape(pos.shape + (1,))
    return lax.reshape(pos, get_aval(pos).shape + (1,))


def _scatter_combine(flat: Any, pos: Any, v: Any, op: str) -> Any:
    """multiply/min/max at positions that may repeat: sort the updates by position, combine
    each run of equal positions with a segmented scan, and scatter the last of each run."""
    n = get_aval(v).shape[0]
    size = get_aval(flat).shape[0]
    dtype = get_aval(flat).dtype
    if isinstance(pos, np.ndarray):
        perm = np.argsort(pos, kind="stable").astype(np.int32)
        spos = pos[perm]
    else:
        spos, perm = lax.sort((pos, lax.iota(get_aval(pos).dtype, (n,))), 0, True, 1)
    vals = take(v, perm)
    shift = lambda a, d, fill: lax.pad(a, np.asarray(fill, get_aval(a).dtype)[()], [(d, -d, 0)])  # noqa: E731
    spos_arr = asarray_operand(spos)
    starts = not_equal(spos_arr, shift(spos_arr, 1, -1))
    ident = combine_identity(op, dtype)
    d = 1
    while d < n:
        prev_v, prev_s = shift(vals, d, ident), shift(starts, d, False)
        vals = _where(starts, vals, _combine(op, prev_v, vals))
        starts = logical_or(starts, prev_s)
        d *= 2
    nxt = lax.pad(spos_arr, np.asarray(-1, get_aval(spos_arr).dtype)[()], [(-1, 1, 0)])
    last = not_equal(spos_arr, nxt)
    target = _where(last, spos_arr, size)
    combined = lax.scatter(
        lax.full((size,), ident, dtype), _col(target), vals, axes=(0,), mode="drop"
    )
    return _combine(op, flat, combined)
