"""Slicing primitives: static slice, dynamic_slice, dynamic_update_slice (and in-dim helpers).

Gather and scatter (for integer-array indexing, embeddings and ``.at[]`` updates) live in
``blu.lax.gather_scatter`` and are re-exported here.

Start indices are used as given: negative starts are *not* counted from the end at this level
(blu.numpy normalizes them); dynamic starts are clamped into range as XLA does.
"""

from __future__ import annotations

__all__ = [
    "slice",
    "slice_in_dim",
    "index_in_dim",
    "split",
    "dynamic_slice",
    "dynamic_slice_in_dim",
    "dynamic_index_in_dim",
    "dynamic_update_slice",
    "dynamic_update_slice_in_dim",
    "dynamic_update_index_in_dim",
    "gather",
    "scatter_add",
    "scatter",
]  # public lax functions; keep in sync

import builtins
from collections.abc import Sequence
from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core.aval import ShapedArray
from blu.core.errors import BluShapeError, BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.core.primitive import Primitive
from blu.lax import elementwise as ew
from blu.lax.gather_scatter import gather, grid_indices, lin_jvp, scatter, scatter_add
from blu.lax.shapes import full, pad, reshape, squeeze
from blu.transforms.ad_util import deflinear, is_undefined
from blu.transforms.batching import bdim_to_front, moveaxis

_pyslice = builtins.slice  # this module's `slice` is the lax op

# ---- slice -------------------------------------------------------------------------------------

slice_p = Primitive("slice")


@slice_p.def_impl
def _slice_impl(x: np.ndarray, *, start_indices, limit_indices, strides):
    return x[tuple(_pyslice(s, l, st) for s, l, st in zip(start_indices, limit_indices, strides))]


@slice_p.def_abstract_eval
def _slice_abstract_eval(x: ShapedArray, *, start_indices, limit_indices, strides):
    ok = len(start_indices) == len(limit_indices) == len(strides) == x.ndim
    ok = ok and all(
        0 <= s <= l <= n and st >= 1
        for s, l, st, n in zip(start_indices, limit_indices, strides, x.shape)
    )
    if not ok:
        raise BluShapeError(
            with_user_line(
                f"slice: start_indices {start_indices}, limit_indices {limit_indices}, strides "
                f"{strides} are out of bounds for {x.str_short()} (need 0 <= start <= limit <= "
                "dim and stride >= 1 on each axis)"
            )
        )
    shape = tuple((l - s + st - 1) // st for s, l, st in zip(start_indices, limit_indices, strides))
    return ShapedArray(shape, x.dtype, x.weak_type)


def _slice_transpose(ct, x, *, start_indices, limit_indices, strides):
    in_shape, out_shape = x.aval.shape, get_aval(ct).shape
    config = []
    for s, st, n, m in zip(start_indices, strides, in_shape, out_shape):
        last = s + (m - 1) * st + 1 if m else s  # one past the last element taken
        config.append((s, n - last, st - 1))
    return [pad(ct, 0, config)]


deflinear(slice_p, _slice_transpose)


@slice_p.def_batch
def _slice_batch(axis_size, args, dims, *, start_indices, limit_indices, strides):
    (x,), (d,) = args, dims

    def ins(t: tuple, v: int) -> tuple:
        return t[:d] + (v,) + t[d:]

    params = dict(
        start_indices=ins(start_indices, 0),
        limit_indices=ins(limit_indices, axis_size),
        strides=ins(strides, 1),
    )
    return slice_p.bind(x, **params), d


def slice(
    x: Any,
    start_indices: Sequence[int],
    limit_indices: Sequence[int],
    strides: Sequence[int] | None = None,
) -> Any:
    """Static slice ``x[start:limit:stride]`` on every axis.

    Args:
        x: array of rank r.
        start_indices, limit_indices: r ints with ``0 <= start <= limit <= dim`` (negative
            values are not counted from the end here).
        strides: r ints >= 1 (default all 1).

    Returns:
        array of shape ``ceil((limit - start) / stride)`` per axis.

    Raises:
        BluShapeError: wrong lengths or out-of-bounds indices.
    """
    start = tuple(int(s) for s in start_indices)
    limit = tuple(int(s) for s in limit_indices)
    st = (1,) * len(start) if strides is None else tuple(int(s) for s in strides)
    aval = get_aval(x)
    if aval.shape == limit and not any(start) and all(s == 1 for s in st):
        return x
    return slice_p.bind(x, start_indices=start, limit_indices=limit, strides=st)


def slice_in_dim(x: Any, start_index: int, limit_index: int, stride: int = 1, axis: int = 0) -> Any:
    """``slice`` on one axis only (full range on the others)."""
    shape = get_aval(x).shape
    axis = _axis(axis, len(shape), "slice_in_dim")
    start, limit, strides = [0] * len(shape), list(shape), [1] * len(shape)
    start[axis], limit[axis], strides[axis] = start_index, limit_index, stride
    return slice(x, start, limit, strides)


def index_in_dim(x: Any, index: int, axis: int = 0, keepdims: bool = True) -> Any:
    """Element ``index`` of ``axis`` (static); the axis is kept with size 1 unless not keepdims."""
    out = slice_in_dim(x, index, index + 1, 1, axis)
    return out if keepdims else squeeze(out, (_axis(axis, get_aval(x).ndim, "index_in_dim"),))


def split(operand: Any, sizes: Sequence[int], axis: int = 0) -> list[Any]:
    """``operand`` cut along ``axis`` into consecutive pieces of ``sizes`` (``jax.lax.split``):
    piece ``i`` is ``slice_in_dim(operand, sum(sizes[:i]), sum(sizes[:i + 1]), axis=axis)``.

    Args:
        operand: an array of rank >= 1.
        sizes: non-negative ints summing to ``operand.shape[axis]``.
        axis: the axis to cut (negative counts from the end).

    Returns:
        A list of ``len(sizes)`` arrays of ``operand``'s dtype; each is differentiable.

    Raises:
        BluValueError: ``axis`` out of range, a negative size, or sizes not summing to the
            axis size. BluTypeError: a size that is not an int.
    """
    shape = get_aval(operand).shape
    axis = _axis(axis, len(shape), "split")
    sizes = [dtypes.static_int(n, "split: sizes") for n in sizes]
    if any(n < 0 for n in sizes) or builtins.sum(sizes) != shape[axis]:
        raise BluValueError(
            with_user_line(
                f"split: sizes {sizes} must be non-negative and sum to {shape[axis]}, the size "
                f"of axis {axis} of {get_aval(operand).str_short()}"
            )
        )
    starts = np.cumsum([0, *sizes]).tolist()
    return [slice_in_dim(operand, a, b, axis=axis) for a, b in zip(starts[:-1], starts[1:])]


def _axis(axis: int, ndim: int, name: str) -> int:
    axis = dtypes.static_int(axis, f"{name}: axis")
    if not -ndim <= axis < ndim:
        raise BluValueError(with_user_line(f"{name}: axis {axis} out of range for rank {ndim}"))
    return axis % ndim


# ---- shared by dynamic_slice and dynamic_update_slice ------------------------------------------


def _clamped_starts(starts: Sequence[np.ndarray], shape, sizes) -> list[int]:
    """XLA's rule: each start is clamped to ``[0, dim - size]`` so the window fits."""
    return [min(max(int(s), 0), n - m) for s, n, m in zip(starts, shape, sizes)]


def _check_starts(name: str, x: ShapedArray, starts: Sequence[ShapedArray]) -> None:
    if len(starts) != x.ndim or any(s.ndim != 0 or not dtypes.is_int(s.dtype) for s in starts):
        got = ", ".join(s.str_short() for s in starts)
        raise BluTypeError(
            with_user_line(
                f"{name}: needs one scalar integer start index per axis of {x.str_short()}, "
                f"got ({got})"
            )
        )


def _start_operand(s: Any) -> Any:
    """A start index as an operand: Python ints become int32 (int64 if large) numpy scalars."""
    if isinstance(s, (int, np.integer)) and not isinstance(s, bool):
        small = -(2**31) <= int(s) < 2**31
        return np.asarray(int(s), dtypes.int32 if small else dtypes.int64)[()]
    return s


def _wrapped_starts(
    starts: Sequence[Any], shape: tuple[int, ...], allow: bool | Sequence[bool]
) -> list[Any]:
    """Start operands with a negative start counted from the end (``s + dim``): Python ints
    at once, traced signed ones by a select (JAX's ``allow_negative_indices``)."""
    if not hasattr(starts, "__len__"):
        raise BluTypeError(
            with_user_line(f"start_indices must be a sequence of scalar ints, got {starts!r}")
        )
    allow = [allow] * len(starts) if isinstance(allow, bool) else list(allow)
    if len(allow) != len(starts):
        raise BluValueError(
            with_user_line(
                f"allow_negative_indices has {len(allow)} entries for {len(starts)} start indices"
            )
        )
    out = []
    for s, wrap, n in zip(starts, allow, list(shape) + [0] * (len(starts) - len(shape))):
        if not wrap:
            out.append(_start_operand(s))
            continue
        if isinstance(s, np.ndarray) and s.ndim == 0 and dtypes.is_int(s.dtype):
            s = s[()]  # a concrete index: wrapped here, not traced
        if isinstance(s, (int, np.integer)) and not isinstance(s, bool):
            s = int(s) + n if int(s) < 0 else int(s)
        s = _start_operand(s)
        dt = get_aval(s).dtype
        if not isinstance(s, np.generic) and dtypes.is_int(dt) and not dtypes.is_unsigned(dt):
            if n > np.iinfo(dt).max:  # a narrow start for a long axis: widened to hold s + n
                s = ew.convert_element_type(s, dtypes.int32 if n < 2**31 else dtypes.int64)
            s = ew.select(ew.lt(s, 0), ew.add(s, n), s)
        out.append(s)
    return out


def _batched_clamped_starts(starts, dims, shape, sizes, axis_size) -> list[Any]:
    """Start indices as ``(axis_size,)`` vectors of one int dtype, clamped like XLA."""
    wide = max(shape, default=0) >= 2**31 or any(
        get_aval(s).dtype in (dtypes.int64, dtypes.uint32, dtypes.uint64) for s in starts
    )
    dt = dtypes.int64 if wide else dtypes.int32
    out = []
    for s, d, n, m in zip(starts, dims, shape, sizes):
        s = bdim_to_front(ew.convert_element_type(s, dt), d, axis_size)
        s = ew.select(ew.lt(s, 0), 0, s)
        s = ew.select(ew.gt(s, n - m), n - m, s)
        out.append(s)
    return out


# ---- dynamic_slice -----------------------------------------------------------------------------

dynamic_slice_p = Primitive("dynamic_slice")


@dynamic_slice_p.def_impl
def _dynamic_slice_impl(x: np.ndarray, *starts: np.ndarray, slice_sizes):
    begin = _clamped_starts(starts, x.shape, slice_sizes)
    return x[tuple(_pyslice(b, b + m) for b, m in zip(begin, slice_sizes))]


@dynamic_slice_p.def_abstract_eval
def _dynamic_slice_abstract_eval(x: ShapedArray, *starts: ShapedArray, slice_sizes):
    _check_starts("dynamic_slice", x, starts)
    if len(slice_sizes) != x.ndim or any(not 0 <= m <= n for m, n in zip(slice_sizes, x.shape)):
        raise BluShapeError(
            with_user_line(
                f"dynamic_slice: slice_sizes {slice_sizes} do not fit in {x.str_short()}"
            )
        )
    return ShapedArray(slice_sizes, x.dtype, x.weak_type)


lin_jvp(dynamic_slice_p, (0,))


@dynamic_slice_p.def_transpose
def _dynamic_slice_transpose(ct, x, *starts, slice_sizes):
    zeros = full(x.aval.shape, 0, x.aval.dtype)
    return [dynamic_update_slice_p.bind(zeros, ct, *starts)] + [None] * len(starts)


@dynamic_slice_p.def_batch
def _dynamic_slice_batch(axis_size, args, dims, *, slice_sizes):
    x, starts = args[0], args[1:]
    xd, sds = dims[0], dims[1:]
    if all(d is None for d in sds):
        # only x is batched: take the whole batch axis
        starts = list(starts)
        starts.insert(xd, np.int32(0))
        sizes = slice_sizes[:xd] + (axis_size,) + slice_sizes[xd:]
        return dynamic_slice_p.bind(x, *starts, slice_sizes=sizes), xd
    # per-member starts: a gather of the window's coordinates (and of the member's own x
    # when x is batched too)
    x_shape = get_aval(x).shape
    shape = x_shape if xd is None else x_shape[:xd] + x_shape[xd + 1 :]
    vecs = _batched_clamped_starts(starts, sds, shape, slice_sizes, axis_size)
    if xd is None:
        idx = grid_indices(vecs, slice_sizes, axis_size, member=False)
        return gather(x, idx, axes=tuple(range(len(shape)))), 0
    idx = grid_indices(vecs, slice_sizes, axis_size)
    return gather(moveaxis(x, xd, 0), idx, axes=tuple(range(len(shape) + 1))), 0


def dynamic_slice(
    x: Any,
    start_indices: Sequence[Any],
    slice_sizes: Sequence[int],
    *,
    allow_negative_indices: bool | Sequence[bool] = True,
) -> Any:
    """The window of ``slice_sizes`` starting at ``start_indices`` (traced values allowed).

    Args:
        x: array of rank r.
        start_indices: r scalar integer arrays/tracers or ints. A negative start counts from
            the end of its dimension once (``s + dim``, as in JAX); then each is clamped into
            ``[0, dim - size]`` so the window lies inside x (as in XLA).
        slice_sizes: r static ints, ``0 <= size <= dim``.
        allow_negative_indices: False (or False per dimension) where the starts are known
            non-negative: no wrap is traced for them (JAX's flag).

    Returns:
        array of shape ``slice_sizes`` and x's dtype.

    Raises:
        BluShapeError: sizes do not fit. BluTypeError: starts are not scalar ints, or too few.
    """
    try:
        sizes = tuple(slice_sizes)
    except TypeError:
        raise BluTypeError(
            with_user_line(f"dynamic_slice: slice_sizes must be ints, got {slice_sizes!r}")
        ) from None
    sizes = tuple(dtypes.static_int(m, "dynamic_slice: slice_sizes entry") for m in sizes)
    starts = _wrapped_starts(start_indices, get_aval(x).shape, allow_negative_indices)
    return dynamic_slice_p.bind(x, *starts, slice_sizes=sizes)


def dynamic_slice_in_dim(
    x: Any,
    start_index: Any,
    slice_size: int,
    axis: int = 0,
    *,
    allow_negative_indices: bool = True,
) -> Any:
    """``dynamic_slice`` on one axis (start 0, full size on the others)."""
    shape = get_aval(x).shape
    axis = _axis(axis, len(shape), "dynamic_slice_in_dim")
    starts: list[Any] = [0] * len(shape)
    sizes = list(shape)
    starts[axis], sizes[axis] = start_index, slice_size
    return dynamic_slice(x, starts, sizes, allow_negative_indices=allow_negative_indices)


def dynamic_index_in_dim(
    x: Any, index: Any, axis: int = 0, keepdims: bool = True, *, allow_negative_indices: bool = True
) -> Any:
    """Element ``index`` (traced allowed; negative counts from the end, then clamped) of
    ``axis``; squeezed unless keepdims."""
    out = dynamic_slice_in_dim(x, index, 1, axis, allow_negative_indices=allow_negative_indices)
    return out if keepdims else squeeze(out, (_axis(axis, get_aval(x).ndim, "index"),))


# ---- dynamic_update_slice ----------------------------------------------------------------------

dynamic_update_slice_p = Primitive("dynamic_update_slice")


@dynamic_update_slice_p.def_impl
def _dus_impl(x: np.ndarray, update: np.ndarray, *starts: np.ndarray):
    begin = _clamped_starts(starts, x.shape, update.shape)
    out = x.copy()
    out[tuple(_pyslice(b, b + m) for b, m in zip(begin, update.shape))] = update
    return out


@dynamic_update_slice_p.def_abstract_eval
def _dus_abstract_eval(x: ShapedArray, update: ShapedArray, *starts: ShapedArray):
    _check_starts("dynamic_update_slice", x, starts)
    if update.ndim != x.ndim or any(m > n for m, n in zip(update.shape, x.shape)):
        raise BluShapeError(
            with_user_line(
                f"dynamic_update_slice: update {update.str_short()} does not fit in operand "
                f"{x.str_short()}"
            )
        )
    if update.dtype != x.dtype:
        raise BluTypeError(
            with_user_line(
                f"dynamic_update_slice: update {update.str_short()} must have the dtype of the "
                f"operand {x.str_short()}"
            )
        )
    return x


lin_jvp(dynamic_update_slice_p, (0, 1))


@dynamic_update_slice_p.def_transpose
def _dus_transpose(ct, x, update, *starts):
    u_aval = update.aval if is_undefined(update) else get_aval(update)
    ct_x = ct_u = None
    if is_undefined(x):
        zeros = full(u_aval.shape, 0, u_aval.dtype)
        ct_x = dynamic_update_slice_p.bind(ct, zeros, *starts)
    if is_undefined(update):
        ct_u = dynamic_slice_p.bind(ct, *starts, slice_sizes=u_aval.shape)
    return [ct_x, ct_u] + [None] * len(starts)


@dynamic_update_slice_p.def_batch
def _dus_batch(axis_size, args, dims):
    (x, update), starts = args[:2], args[2:]
    (xd, ud), sds = dims[:2], dims[2:]
    x = bdim_to_front(x, xd, axis_size)
    update = bdim_to_front(update, ud, axis_size)
    if all(d is None for d in sds):
        return dynamic_update_slice_p.bind(x, update, np.int32(0), *starts), 0
    # per-member starts: a scatter to the window's coordinates (in bounds once clamped)
    shape, sizes = get_aval(x).shape[1:], get_aval(update).shape[1:]
    vecs = _batched_clamped_starts(starts, sds, shape, sizes, axis_size)
    idx = grid_indices(vecs, sizes, axis_size)
    return scatter(x, idx, update, axes=tuple(range(len(shape) + 1)), mode="clip"), 0


def dynamic_update_slice(
    x: Any,
    update: Any,
    start_indices: Sequence[Any],
    *,
    allow_negative_indices: bool | Sequence[bool] = True,
) -> Any:
    """``x`` with the window at ``start_indices`` replaced by ``update``.

    Args:
        x: array of rank r.
        update: array of rank r and x's dtype, each dim <= x's.
        start_indices: r scalar integer arrays/tracers or ints; a negative one counts from the
            end once (as in JAX), then each is clamped into ``[0, dim - update_dim]`` (as in
            XLA).
        allow_negative_indices: as :func:`dynamic_slice`'s.

    Returns:
        array like x.

    Raises:
        BluShapeError / BluTypeError: the update does not fit, or starts are not scalar ints.
    """
    starts = _wrapped_starts(start_indices, get_aval(x).shape, allow_negative_indices)
    return dynamic_update_slice_p.bind(x, update, *starts)


def dynamic_update_slice_in_dim(
    x: Any, update: Any, start_index: Any, axis: int = 0, *, allow_negative_indices: bool = True
) -> Any:
    """``dynamic_update_slice`` with the update placed at ``start_index`` on one axis."""
    nd = get_aval(x).ndim
    axis = _axis(axis, nd, "dynamic_update_slice_in_dim")
    starts: list[Any] = [0] * nd
    starts[axis] = start_index
    return dynamic_update_slice(x, update, starts, allow_negative_indices=allow_negative_indices)


def dynamic_update_index_in_dim(
    x: Any, update: Any, index: Any, axis: int = 0, *, allow_negative_indices: bool = True
) -> Any:
    """Replace element ``index`` of ``axis``; ``update`` has x's shape without that axis (or
    with it at size 1)."""
    nd = get_aval(x).ndim
    axis = _axis(axis, nd, "dynamic_update_index_in_dim")
    u_shape = get_aval(update).shape
    if len(u_shape) == nd - 1:
        update = reshape(update, u_shape[:axis] + (1,) + u_shape[axis:])
    return dynamic_update_slice_in_dim(
        x, update, index, axis, allow_negative_indices=allow_negative_indices
    )
