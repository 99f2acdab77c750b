"""Selecting elements: take, take_along_axis (gathers), diagonal/diag (strided slices), nonzero
and ``where`` (whose one-argument form is ``nonzero``; the three-argument form is
``ufuncs._where``)."""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from blu import lax
from blu.core import dtypes
from blu.core.array import Array
from blu.core.errors import (
    BluIndexError,
    BluShapeError,
    BluTypeError,
    BluValueError,
    with_user_line,
)
from blu.core.interpreter import Tracer, get_aval
from blu.numpy._promote import (
    asarray_operand,
    asarray_operand_in,
    broadcast_shapes,
    broadcast_to,
    canonicalize_axis,
    concrete_value,
)
from blu.numpy.logic import greater_equal, less, logical_or, to_bool
from blu.numpy.manipulation import moveaxis, ravel
from blu.numpy.ufuncs import _where, add, mod

__all__ = ["take", "take_along_axis", "diagonal", "diag", "nonzero", "where"]


def _aval(x: Any):
    return get_aval(x)


# ---- take --------------------------------------------------------------------------------------


def _normalize_index(idx: Any, n: int) -> Any:
    """Negative indices count from the end (numpy arrays stay numpy; traced ones use lax)."""
    if isinstance(idx, np.ndarray):
        return np.where(idx < 0, idx + n, idx)
    return _where(less(idx, 0), add(idx, n), idx)


def _wider(src: Any, dt: Any) -> bool:
    """Whether the integer dtype ``src`` holds values the integer dtype ``dt`` does not."""
    si, di = np.iinfo(src), np.iinfo(dt)
    return bool(si.min < di.min or si.max > di.max)


def _fit_index(arr: Any, n: int, dt: Any) -> Any:
    """Integer indices ``arr`` (numpy or traced) made safe to convert to the index dtype ``dt``
    of an axis of size ``n``: when ``arr``'s dtype holds values ``dt`` does not (int64, uint32
    or uint64 into int32), they are first clamped into ``[-n - 1, n]``, which keeps every
    out-of-bounds index out of bounds (a bare conversion wraps ``2**32 + 1`` to ``1``, a valid
    index). Indices of a narrower dtype are returned as they are."""
    src = np.dtype(get_aval(arr).dtype)
    if not _wider(src, dt):
        return arr
    si = np.iinfo(src)
    lo, hi = max(int(si.min), -n - 1), n
    if isinstance(arr, np.ndarray):
        return np.asarray(np.clip(arr, src.type(lo), src.type(hi)))
    if lo > si.min:
        arr = lax.max(arr, lax.full_like(arr, lo))
    return lax.min(arr, lax.full_like(arr, hi))


def _index_array(indices: Any, name: str, n: int | None = None, wrap: bool = False) -> Any:
    """Integer indices as a numpy array (when concrete) or an int32 tracer.

    With ``n`` (the indexed axis' size), indices of a dtype wider than int32 keep being out of
    bounds when they are (``_fit_index``), or with ``wrap`` are first taken modulo
    ``n`` in their own dtype; a bare conversion would wrap ``2**32 + 1`` to the valid ``1``.

    Raises:
        BluTypeError: the indices are not integers.
    """
    if not isinstance(indices, Tracer):
        indices = np.asarray(indices)
    d = np.dtype(_aval(indices).dtype)
    if d.kind not in "iu":
        raise BluTypeError(with_user_line(f"{name}: indices must be integers, got {d}"))
    if n is not None and _wider(d, np.int32):
        if wrap and n > 0:
            indices = np.mod(indices, n) if isinstance(indices, np.ndarray) else mod(indices, n)
        indices = _fit_index(indices, n, np.int32)
    if isinstance(indices, np.ndarray):
        big = indices.size and np.abs(indices.astype(np.int64)).max() > 2**31 - 2
        return indices.astype(np.int64 if big else np.int32)
    return lax.convert_element_type(indices, dtypes.int32)


def default_fill(dtype: Any) -> Any:
    """What an out-of-bounds index reads in mode 'fill' without a ``fill_value`` (JAX's): NaN
    for inexact dtypes, True for bool, the most negative signed or the largest unsigned int."""
    if dtypes.is_inexact(dtype):
        return np.nan
    if dtype == dtypes.bool_:
        return True
    info = np.iinfo(dtype)
    return int(info.max) if dtypes.is_unsigned(dtype) else int(info.min)


def take(
    a: Any,
    indices: Any,
    axis: int | None = None,
    out: None = None,
    mode: str | None = None,
    unique_indices: bool = False,
    indices_are_sorted: bool = False,
    fill_value: Any = None,
) -> Any:
    """Elements of ``a`` at ``indices`` along ``axis`` (raveled when None); numpy's and JAX's
    signature (``out`` must be None; ``unique_indices`` and ``indices_are_sorted`` are hints
    that never change the result).

    Negative indices count from the end; out-of-bounds indices are clamped (``mode`` None or
    'clip'; JAX's default is 'fill'), wrapped ('wrap') or read ``fill_value`` with 'fill'
    (default as JAX's: NaN for floats, the most negative value for signed ints, the largest
    for unsigned, True for bool); with 'raise' (numpy's) they are an error. 'raise' needs
    concrete indices: traced ones (under ``jit``) cannot be checked, so it is refused there
    (JAX refuses it too): use 'clip' or 'fill'.

    Raises:
        BluIndexError: ``mode="raise"`` and an index outside ``[-n, n)``, or indices into an
            empty axis with a mode other than 'fill'.
        BluValueError: ``mode="raise"`` with traced indices, an unknown mode, or ``out``.
    """
    if out is not None:
        hint = (
            f"; {out!r} in 4th place looks like a mode, which is the 5th: pass mode={out!r}"
            if isinstance(out, str)
            else ""
        )  # (mode was the 4th positional before numpy's and JAX's order)
        raise BluValueError(
            with_user_line(f"take: out= is not supported (arrays are immutable){hint}")
        )
    a = asarray_operand(a)
    if axis is None:
        a, axis = ravel(a), 0
    s = _aval(a).shape
    axis = canonicalize_axis(axis, len(s), "take")
    n = s[axis]
    idx = _index_array(indices, "take", None if mode == "raise" else n, mode == "wrap")
    if n == 0 and _aval(idx).size and mode in (None, "clip", "wrap"):
        # nothing to clamp or wrap to (numpy and JAX raise too); 'fill' reads fill_value
        raise BluIndexError(
            with_user_line(
                f"take: cannot take indices from the empty axis {axis} of an array of shape "
                f"{s} with mode={mode!r} (mode='fill' reads fill_value there)"
            )
        )
    if mode == "raise":
        _check_in_range(idx, n, axis)
    if mode == "wrap":
        idx = np.mod(idx, n) if isinstance(idx, np.ndarray) else mod(idx, n)
    elif mode in (None, "clip", "fill", "raise"):
        if mode != "clip":
            idx = _normalize_index(idx, n)
    else:
        raise BluValueError(with_user_line(f"take: unknown mode {mode!r}"))
    ishape = _aval(idx).shape
    idx_e = idx[..., None] if isinstance(idx, np.ndarray) else lax.reshape(idx, ishape + (1,))
    out = lax.gather(a, idx_e, axes=(axis,), mode="fill" if mode == "fill" else "clip")
    nb = len(ishape)
    if mode == "fill":
        dt = _aval(a).dtype
        fill_value = np.asarray(default_fill(dt), dt) if fill_value is None else fill_value
        bad = logical_or(less(idx, 0), greater_equal(idx, n))
        bad = lax.broadcast_in_dim(bad, _aval(out).shape, tuple(range(nb)))
        fill = lax.convert_element_type(asarray_operand_in(fill_value, dt), dt)
        out = _where(bad, fill, out)
    # gather puts the index dims first; numpy puts them at ``axis``
    perm = list(range(nb, nb + axis)) + list(range(nb)) + list(range(nb + axis, nb + len(s) - 1))
    return lax.transpose(out, tuple(perm))


def _check_in_range(idx: Any, n: int, axis: int) -> None:
    if not isinstance(idx, np.ndarray):
        raise BluValueError(
            with_user_line(
                "take: mode='raise' cannot check traced indices (under jit their values are "
                "not known); use mode='clip' or mode='fill' there, or check the indices "
                "before jit"
            )
        )
    bad = (idx < -n) | (idx >= n)
    if bad.any():
        i = int(idx[bad].flat[0])
        raise BluIndexError(
            with_user_line(
                f"take: index {i} is out of bounds for axis {axis} with size {n} "
                f"({int(bad.sum())} out-of-range index(es); mode='raise')"
            )
        )


def take_along_axis(
    arr: Any, indices: Any, axis: int | None, mode: str | None = None, fill_value: Any = None
) -> Any:
    """``out[..., j, ...] = arr[..., indices[..., j, ...], ...]`` along ``axis``; the other axes
    of ``indices`` and ``arr`` broadcast (numpy's rules). Negative indices count from the end.

    Out-of-bounds indices follow ``mode``, as in ``take``: None or 'clip' clamps them, 'wrap'
    wraps them (modulo the axis size), 'fill' reads ``fill_value`` (default as ``take``'s).

    Raises:
        BluValueError: unknown mode, or ``fill_value`` without mode 'fill'.
    """
    if mode not in (None, "clip", "wrap", "fill"):
        raise BluValueError(with_user_line(f"take_along_axis: unknown mode {mode!r}"))
    if fill_value is not None and mode != "fill":
        raise BluValueError(with_user_line("take_along_axis: fill_value needs mode='fill'"))
    arr = asarray_operand(arr)
    if axis is None:
        arr, axis = ravel(arr), 0
    s = _aval(arr).shape
    if not isinstance(indices, Tracer):
        indices = np.asarray(indices)
    ishape = _aval(indices).shape
    if len(ishape) != len(s):
        raise BluShapeError(
            with_user_line(
                f"take_along_axis: indices of rank {len(ishape)} for an array of rank {len(s)}"
            )
        )
    axis = canonicalize_axis(axis, len(s), "take_along_axis")
    n = s[axis]
    idx = _index_array(indices, "take_along_axis", n, mode == "wrap")
    raw = idx
    if mode == "wrap":
        idx = np.mod(idx, max(n, 1)) if isinstance(idx, np.ndarray) else mod(idx, max(n, 1))
    else:
        idx = _normalize_index(idx, n)
    out_shape = list(
        broadcast_shapes(
            tuple(d for i, d in enumerate(s) if i != axis),
            tuple(d for i, d in enumerate(ishape) if i != axis),
        )
    )
    out_shape.insert(axis, ishape[axis])
    out_shape = tuple(out_shape)
    cols = []
    for ax in range(len(s)):
        if ax == axis:
            col = (
                np.broadcast_to(idx, out_shape)
                if isinstance(idx, np.ndarray)
                else broadcast_to(idx, out_shape)
            )
        elif s[ax] == 1:
            col = np.zeros(out_shape, np.int32)
        else:
            col = lax.iota(dtypes.int32, out_shape, ax)
        cols.append(col)
    if all(isinstance(c, np.ndarray) for c in cols):
        full_idx = np.stack(cols, -1).astype(np.int32)
    else:
        full_idx = lax.concatenate(
            [
                lax.reshape(
                    lax.convert_element_type(asarray_operand(c), dtypes.int32), out_shape + (1,)
                )
                for c in cols
            ],
            len(out_shape),
        )
    out = lax.gather(arr, full_idx, axes=tuple(range(len(s))), mode="clip")
    if mode == "fill":
        bad = logical_or(less(raw, -n), greater_equal(raw, n))
        dt = _aval(arr).dtype
        fill = np.asarray(default_fill(dt), dt) if fill_value is None else fill_value
        fill = lax.convert_element_type(asarray_operand_in(fill, dt), dt)
        out = _where(broadcast_to(bad, out_shape), fill, out)
    return out


# ---- diagonals ---------------------------------------------------------------------------------


def diagonal(a: Any, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Any:
    """The diagonal ``offset`` of the ``(axis1, axis2)`` planes, as the last axis (a strided
    slice of the flattened planes)."""
    a = asarray_operand(a)
    s = _aval(a).shape
    if len(s) < 2:
        raise BluShapeError(
            with_user_line(f"diagonal: needs rank >= 2, got {_aval(a).str_short()}")
        )
    i, j = (
        canonicalize_axis(axis1, len(s), "diagonal"),
        canonicalize_axis(axis2, len(s), "diagonal"),
    )
    if i == j:
        raise BluValueError(with_user_line("diagonal: axis1 and axis2 must differ"))
    a = moveaxis(a, (i, j), (-2, -1))
    rest = _aval(a).shape[:-2]
    n, m = _aval(a).shape[-2:]
    offset = int(offset)
    length = builtins.max(0, builtins.min(n + builtins.min(offset, 0), m - builtins.max(offset, 0)))
    flat = lax.reshape(a, rest + (n * m,))
    start = offset if offset >= 0 else -offset * m
    if length == 0:
        return lax.slice(flat, (0,) * len(rest) + (0,), rest + (0,))
    limit = start + (length - 1) * (m + 1) + 1
    nd = len(rest)
    return lax.slice(flat, (0,) * nd + (start,), rest + (limit,), (1,) * nd + (m + 1,))


def diag(v: Any, k: int = 0) -> Any:
    """The diagonal ``k`` of a 2-D array, or a 2-D array with the 1-D ``v`` on diagonal ``k``."""
    v = asarray_operand(v)
    s = _aval(v).shape
    if len(s) == 2:
        return diagonal(v, k)
    if len(s) != 1:
        raise BluShapeError(
            with_user_line(f"diag: input must be 1-D or 2-D, got {_aval(v).str_short()}")
        )
    n = s[0] + builtins.abs(int(k))
    k = int(k)
    padded = lax.pad(v, np.asarray(0, _aval(v).dtype)[()], [(0, builtins.abs(k), 0)])
    rows, cols = lax.iota(dtypes.int32, (n, n), 0), lax.iota(dtypes.int32, (n, n), 1)
    on = lax.eq(lax.sub(cols, rows), lax.full((n, n), k, dtypes.int32))
    vals = lax.broadcast_in_dim(padded, (n, n), (0,) if k >= 0 else (1,))
    return lax.select(on, vals, lax.full((n, n), 0, _aval(v).dtype))


# ---- nonzero -------------------------------------------------------------------------------------


def nonzero(a: Any, *, size: int | None = None, fill_value: Any = None) -> tuple:
    """Indices of the nonzero elements, one int32 array per axis (row-major order).

    Without ``size`` the input must be concrete (the result's length depends on its values).
    With a static ``size`` it also works on traced arrays (as in JAX): the first ``size``
    indices are kept and missing ones are ``fill_value`` (default 0).

    Raises:
        ConcretizationError: ``a`` is traced and ``size`` is None (use ``bnp.where(cond, x, y)``,
            a mask, or pass ``size=``). BluShapeError: ``a`` is 0-d (as numpy 2).
    """
    if _aval(a).ndim == 0:
        # numpy 2 and the Array API: a 0-d array has no axes to index (atleast_1d it first)
        raise BluShapeError(with_user_line("nonzero: a 0-d array has no indices (use atleast_1d)"))
    fills = _nonzero_fills(fill_value, _aval(a).ndim)
    if size is None or not isinstance(a, Tracer):
        v = concrete_value(a, "nonzero (or one-argument where) without size=")
        idx = np.nonzero(np.atleast_1d(v))
        if size is not None:
            idx = tuple(
                np.concatenate([i[:size], np.full(builtins.max(size - len(i), 0), fill)])
                for i, fill in zip(idx, fills)
            )
        return tuple(Array(i.astype(np.int32)) for i in idx)
    # traced, fixed size: the k-th nonzero element's flat index is written to slot k
    mask = to_bool(a)
    shape = get_aval(mask).shape or (1,)
    n = int(np.prod(shape))
    flat = lax.convert_element_type(lax.reshape(mask, (n,)), dtypes.int32)
    slot = lax.sub(lax.cumsum(flat, 0), lax.full((n,), 1, dtypes.int32))
    slot = lax.select(
        lax.eq(flat, lax.full((n,), 1, dtypes.int32)), slot, lax.full_like(slot, size)
    )
    empty = lax.full((size,), -1, dtypes.int32)
    pos = lax.scatter(empty, lax.reshape(slot, (n, 1)), lax.iota(dtypes.int32, (n,)), axes=(0,))
    missing = lax.lt(pos, lax.full_like(pos, 0))
    out = []
    for k, d in enumerate(shape):
        stride = int(np.prod(shape[k + 1 :]))
        coord = lax.rem(lax.div(pos, lax.full_like(pos, stride)), lax.full_like(pos, d))
        out.append(_where(missing, fills[k], coord))
    return tuple(out)


def _nonzero_fills(fill_value: Any, ndim: int) -> tuple:
    """One scalar fill per axis: ``fill_value`` (default 0) or a tuple of ``ndim`` scalars (as
    JAX's).

    Raises:
        BluValueError: a tuple of another length, or a non-scalar fill.
    """
    fills = fill_value if isinstance(fill_value, tuple) else (fill_value,) * ndim
    if len(fills) != ndim or any(np.ndim(f) if not isinstance(f, Tracer) else _aval(f).ndim
                                 for f in fills):  # fmt: skip
        raise BluValueError(
            with_user_line(
                f"nonzero: fill_value must be a scalar or a tuple of {ndim} scalars (one per "
                f"axis), got {fill_value!r}"
            )
        )
    return tuple(0 if f is None else f for f in fills)


def where(
    condition: Any, x: Any = None, y: Any = None, *, size: int | None = None, fill_value: Any = None
) -> Any:
    """``x`` where ``condition`` else ``y`` (all three broadcast; x and y promote).

    With only ``condition`` this is ``nonzero(condition, size=size, fill_value=fill_value)``,
    which needs a concrete condition unless ``size`` is given.

    Raises:
        BluValueError: exactly one of ``x``, ``y`` given. ConcretizationError: the
            one-argument form on a traced condition without ``size``.
    """
    if x is None and y is None:
        return nonzero(condition, size=size, fill_value=fill_value)
    if x is None or y is None:
        raise BluValueError(with_user_line("where: give both x and y, or neither"))
    return _where(condition, x, y)
