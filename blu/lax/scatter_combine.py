"""Scatters with other combiners (``scatter_sub``, ``scatter_mul``, ``scatter_min``,
``scatter_max``) and ``index_take``, composed of the gather/scatter primitives; no primitives of
their own.

They take ``scatter_add``'s arguments (blu's point-index form of XLA's scatter: ``indices`` of
shape ``batch_shape + (len(axes),)``, ``updates`` of shape ``batch_shape + rest_shape``; see
``blu.lax.gather_scatter``). ``scatter_sub`` is ``scatter_add`` of ``-updates``. The others sort
the update rows by their flat position over ``axes``, combine each run of equal positions with a
segmented scan (``log2(rows)`` steps of shifted combines), write the last of each run into an
array of the combiner's identity and combine that with the operand; so every duplicate
coordinate takes part, as in ``np.multiply.at`` / ``np.minimum.at`` / ``np.maximum.at``, and the
derivatives are those of the composition (the product rule; at ties of ``min``/``max`` the
gradient splits, as ``lax.min``'s and ``lax.max``'s).
"""

from __future__ import annotations

__all__ = ["scatter_sub", "scatter_mul", "scatter_min", "scatter_max", "index_take"]

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core.errors import BluShapeError, BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.lax import elementwise as ew
from blu.lax.bits import and_, or_
from blu.lax.casts import convert_element_type
from blu.lax.gather_scatter import (
    _mode,
    _prepare,
    _scatter_abstract_eval,
    gather,
    scatter,
    scatter_add,
)
from blu.lax.shapes import (
    broadcast_in_dim,
    concatenate,
    full,
    iota,
    pad,
    reshape,
    transpose,
)
from blu.lax.slicing import slice_in_dim
from blu.lax.sorting import sort


def _checked(name: str, operand: Any, indices: Any, updates: Any, axes: Any, mode: str):
    indices, axes = _prepare(name, operand, indices, axes)
    mode = _mode(mode)
    _scatter_abstract_eval(name)(
        get_aval(operand), get_aval(indices), get_aval(updates), axes=axes, mode=mode
    )
    return indices, axes, mode


def scatter_sub(
    operand: Any, indices: Any, updates: Any, *, axes: Sequence[int], mode: str = "drop"
) -> Any:
    """Subtract each row of ``updates`` from the operand at its coordinates (JAX's
    ``lax.scatter_sub``; ``x.at[i].subtract(u)``): ``scatter_add`` of ``-updates``.

    Arguments as for ``scatter_add``; duplicate coordinates all subtract. Unsigned integers
    wrap around, as their subtraction does.

    Raises:
        BluTypeError: bool operands (no subtraction), non-integer indices, updates of another
        dtype. BluShapeError / BluValueError: as ``scatter_add``.
    """
    indices, axes, mode = _checked("scatter_sub", operand, indices, updates, axes, mode)
    if get_aval(operand).dtype == dtypes.bool_:
        raise BluTypeError(
            with_user_line(
                f"scatter_sub: bool operand {get_aval(operand).str_short()} has no subtraction"
            )
        )
    return scatter_add(operand, indices, ew.neg(updates), axes=axes, mode=mode)


def combine_identity(op: str, dtype: np.dtype) -> Any:
    """The identity of combiner ``op`` (``"mul"``, ``"min"``, ``"max"``) in ``dtype``: what a
    segmented scan shifts in (also ``blu.numpy``'s ``x.at[].multiply/min/max``)."""
    if op == "mul":
        return True if dtype == dtypes.bool_ else 1
    if dtypes.is_float(dtype):
        return np.inf if op == "min" else -np.inf
    if dtypes.is_complex(dtype):  # complex order is lexicographic (numpy's and JAX's)
        return complex(np.inf, np.inf) if op == "min" else complex(-np.inf, -np.inf)
    if dtype == dtypes.bool_:
        return op == "min"
    info = np.iinfo(dtype)
    return int(info.max) if op == "min" else int(info.min)


def _combine(op: str, a: Any, b: Any) -> Any:
    if op == "mul":
        return and_(a, b) if get_aval(a).dtype == dtypes.bool_ else ew.mul(a, b)
    return ew.min(a, b) if op == "min" else ew.max(a, b)


def _positions(indices: Any, dims: Sequence[int], mode: str) -> Any:
    """Each row's flat position over the indexed axes (row-major), as int32 / int64; rows with
    an out-of-bounds coordinate get ``prod(dims)`` (past the end) under 'fill_or_drop', and
    their coordinates are clamped under 'clip'."""
    aval = get_aval(indices)
    total = math.prod(dims)
    wide = dtypes.int32 if total < 2**31 - 1 else dtypes.int64
    batch = aval.shape[:-1]
    pos: Any = full(batch, 0, wide)
    valid: Any = None
    stride = total
    for k, n in enumerate(dims):
        stride //= n
        c = reshape(_column(indices, k), batch)
        top = min(n - 1, int(dtypes.iinfo(aval.dtype).max))
        ok = ew.le(c, full(batch, top, aval.dtype)) if top == n - 1 else None
        if not dtypes.is_unsigned(aval.dtype):
            low = ew.ge(c, full(batch, 0, aval.dtype))
            ok = low if ok is None else and_(ok, low)
            c = ew.max(c, full(batch, 0, aval.dtype))
        c = convert_element_type(ew.min(c, full(batch, top, aval.dtype)), wide)
        if ok is not None:
            valid = ok if valid is None else and_(valid, ok)
        pos = ew.add(pos, ew.mul(c, full(batch, stride, wide)))
    if mode == "fill_or_drop" and valid is not None:
        pos = ew.select(valid, pos, full(batch, total, wide))
    return pos


def _column(indices: Any, k: int) -> Any:
    aval = get_aval(indices)
    if isinstance(indices, np.ndarray):
        return indices[..., k : k + 1]
    return slice_in_dim(indices, k, k + 1, axis=aval.ndim - 1)


def _shift(a: Any, d: int, fill: Any) -> Any:
    """``a`` moved ``d`` rows down along axis 0 (``d < 0``: up), ``fill`` entering."""
    aval = get_aval(a)
    value = np.asarray(fill, aval.dtype)[()]
    cfg = [(d, -d, 0)] + [(0, 0, 0)] * (aval.ndim - 1)
    return pad(a, value, cfg)


def _scatter_combined(name: str, op: str, operand, indices, updates, axes, mode) -> Any:
    indices, axes, mode = _checked(name, operand, indices, updates, axes, mode)
    o_aval, i_aval = get_aval(operand), get_aval(indices)
    rest = [i for i in range(o_aval.ndim) if i not in axes]
    dims = [o_aval.shape[a] for a in axes]
    n_rows = math.prod(i_aval.shape[:-1])
    if n_rows == 0 or 0 in dims or 0 in [o_aval.shape[i] for i in rest]:
        return operand
    total = math.prod(dims)
    width = math.prod(o_aval.shape[i] for i in rest)
    pos = reshape(_positions(indices, dims, mode), (n_rows,))
    vals = reshape(updates, (n_rows, width))
    p_dt = get_aval(pos).dtype
    spos, perm = sort((pos, iota(p_dt, (n_rows,))), 0, True, 1)
    vals = gather(vals, reshape(perm, (n_rows, 1)), axes=(0,))
    ident = combine_identity(op, o_aval.dtype)
    starts = ew.ne(spos, _shift(spos, 1, -1))
    d = 1
    while d < n_rows:  # segmented inclusive scan: combine with the row d above within a run
        run = broadcast_in_dim(starts, (n_rows, width), (0,))
        vals = ew.select(run, vals, _combine(op, _shift(vals, d, ident), vals))
        starts = or_(starts, _shift(starts, d, False))
        d *= 2
    last = ew.ne(spos, _shift(spos, -1, -1))
    target = ew.select(last, spos, full((n_rows,), total, p_dt))
    combined = scatter(
        full((total, width), ident, o_aval.dtype),
        reshape(target, (n_rows, 1)),
        vals,
        axes=(0,),
        mode="fill_or_drop",
    )
    moved = transpose(operand, tuple(axes) + tuple(rest))
    moved_shape = get_aval(moved).shape
    out = _combine(op, reshape(moved, (total, width)), combined)
    out = reshape(out, moved_shape)
    order = list(axes) + rest
    return transpose(out, tuple(order.index(i) for i in range(o_aval.ndim)))


_DOC = """{verb} (JAX's ``lax.{name}``; ``x.at[i].{method}(u)``).

    Arguments as for ``scatter_add``: ``indices`` of shape ``batch_shape + (len(axes),)``,
    ``updates`` of shape ``batch_shape + rest_shape`` and the operand's dtype, ``mode``
    ``'drop'`` (default: rows with an out-of-bounds coordinate are skipped) or ``'clip'``.
    Every row at a repeated coordinate takes part, as in ``np.{ufunc}.at``{order}.

    Raises:
        BluTypeError: non-integer indices, updates of another dtype.
        BluShapeError: updates not of shape ``batch_shape + rest_shape``, indices' last
        dimension not ``len(axes)``. BluValueError: repeated or out-of-range axes, bad mode.
    """


_ORDER = "; complex numbers compare lexicographically (real part first), as ``lax.min``"


def scatter_mul(
    operand: Any, indices: Any, updates: Any, *, axes: Sequence[int], mode: str = "drop"
) -> Any:
    return _scatter_combined("scatter_mul", "mul", operand, indices, updates, axes, mode)


def scatter_min(
    operand: Any, indices: Any, updates: Any, *, axes: Sequence[int], mode: str = "drop"
) -> Any:
    return _scatter_combined("scatter_min", "min", operand, indices, updates, axes, mode)


def scatter_max(
    operand: Any, indices: Any, updates: Any, *, axes: Sequence[int], mode: str = "drop"
) -> Any:
    return _scatter_combined("scatter_max", "max", operand, indices, updates, axes, mode)


scatter_mul.__doc__ = _DOC.format(
    verb="Multiply the operand at each row's coordinates by the row of ``updates``",
    name="scatter_mul", method="multiply", ufunc="multiply", order="",
)  # fmt: skip
scatter_min.__doc__ = _DOC.format(
    verb="The minimum of the operand and each row of ``updates`` at its coordinates",
    name="scatter_min", method="min", ufunc="minimum", order=_ORDER,
)  # fmt: skip
scatter_max.__doc__ = _DOC.format(
    verb="The maximum of the operand and each row of ``updates`` at its coordinates",
    name="scatter_max", method="max", ufunc="maximum", order=_ORDER,
)  # fmt: skip


def index_take(src: Any, idxs: Sequence[Any], axes: Sequence[int]) -> Any:
    """``src[idxs[0], idxs[1], ...]`` along ``axes`` (JAX's ``lax.index_take``).

    Args:
        src: array of any dtype.
        idxs: one 1-d integer array per axis, all of one length ``n``; negative and
            out-of-range indices wrap (floor modulo the axis' size, as JAX's).
        axes: distinct axes of ``src`` (negative counts from the end), one per index array.

    Returns:
        array of shape ``(n,) + [src's other dims, in order]``, src's dtype.

    Raises:
        BluValueError: ``len(idxs) != len(axes)``, repeated or out-of-range axes.
        BluShapeError: an index array that is not 1-d, or lengths that differ.
        BluTypeError: non-integer indices.
    """
    idxs = [np.asarray(i) if isinstance(i, (list, tuple, int)) else i for i in idxs]
    axes = tuple(axes)
    s_aval = get_aval(src)
    if len(idxs) != len(axes):
        raise BluValueError(
            with_user_line(
                f"index_take: {len(idxs)} index arrays for {len(axes)} axes {axes} "
                f"(src {s_aval.str_short()})"
            )
        )
    avals = [get_aval(i) for i in idxs]
    what = ", ".join(a.str_short() for a in avals)
    if any(not dtypes.is_int(a.dtype) for a in avals):
        raise BluTypeError(with_user_line(f"index_take: indices must be integers, got {what}"))
    if any(a.ndim != 1 for a in avals) or len({a.shape for a in avals}) > 1:
        raise BluShapeError(
            with_user_line(f"index_take: indices must be 1-d arrays of one length, got {what}")
        )
    if not idxs:
        raise BluValueError(with_user_line("index_take: needs at least one index array"))
    _, axes = _prepare("index_take", src, np.zeros((0, len(axes)), np.int32), axes)
    wide = (
        dtypes.int64
        if any(a.dtype.itemsize == 8 or a.dtype == np.uint32 for a in avals)
        else dtypes.int32
    )
    n = avals[0].shape[0]
    cols = []
    for i, a in zip(idxs, axes):
        size = max(s_aval.shape[a], 1)
        c = convert_element_type(i, wide)
        m = full((n,), size, wide)
        c = ew.rem(ew.add(ew.rem(c, m), m), m)  # floor modulo
        cols.append(reshape(c, (n, 1)))
    return gather(src, concatenate(cols, 1), axes=axes, mode="fill")
