"""Gather and scatter with a simplified (point-index) semantic; re-exported by blu.lax.slicing.

``indices`` is an integer array of shape ``batch_shape + (len(axes),)``: row ``b`` holds one
coordinate per axis in ``axes``; the other axes of the operand are taken whole. So

- ``gather(operand, indices, axes=axes)`` has shape ``batch_shape + rest_shape`` (``rest_shape``:
  operand dims not in ``axes``, in order), and
  ``out[b..., r...] = operand[coords]`` with ``coords[axes[k]] = indices[b..., k]`` and the
  remaining coordinates ``r`` in order;
- ``scatter_add`` / ``scatter`` take ``updates`` of that same shape and add / write each row back
  at its coordinates.

This covers embedding lookups (``gather(table, ids[..., None], axes=(0,))``), numpy
integer-array indexing (``x[i, :, j]`` is ``gather(x, stack([i, j], -1), axes=(0, 2))``) and
``.at[]`` updates. It is XLA's gather/scatter with slice size 1 on ``axes`` and full elsewhere.

Out-of-bounds indices follow ``mode`` (as JAX's ``GatherScatterMode``): ``'clip'`` clamps each
coordinate into ``[0, dim - 1]``; ``'fill'``/``'drop'`` (one mode, ``'fill_or_drop'``) make a
gather read 0 and a scatter skip the row. Negative indices are out of bounds here (blu.numpy
wraps them first). An indexed axis of size 0 has nothing to clamp to: gathers read 0 and
scatters write nothing.
"""

from __future__ import annotations

__all__: list[str] = []  # public names are exported by blu.lax.slicing

from collections.abc import Sequence
from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core.aval import ShapedArray
from blu.core.errors import BluShapeError, BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.core.primitive import Primitive
from blu.lax import elementwise as ew
from blu.lax.shapes import broadcast_in_dim, concatenate, full, iota, reshape
from blu.transforms.ad_util import Zero, instantiate, is_undefined, zero_like
from blu.transforms.batching import bdim_to_front, moveaxis

_MODES = {"clip": "clip", "fill": "fill_or_drop", "drop": "fill_or_drop"}
_MODES["fill_or_drop"] = "fill_or_drop"


def _mode(mode: str) -> str:
    if mode not in _MODES:
        raise BluValueError(
            with_user_line(f"gather/scatter: mode {mode!r} must be 'clip', 'fill' or 'drop'")
        )
    return _MODES[mode]


def lin_jvp(prim: Primitive, linear: Sequence[int]) -> None:
    """JVP of a primitive jointly linear in the arguments at positions ``linear``; the other
    arguments (integer indices) pass through unchanged."""

    def jvp(primals, tangents, **params):
        out = prim.bind(*primals, **params)
        if all(isinstance(tangents[i], Zero) for i in linear):
            return out, zero_like(out)
        args = [instantiate(tangents[i]) if i in linear else p for i, p in enumerate(primals)]
        return out, prim.bind(*args, **params)

    prim.def_jvp(jvp)


# ---- numpy implementations ---------------------------------------------------------------------


def _rest(ndim: int, axes: tuple[int, ...]) -> list[int]:
    return [i for i in range(ndim) if i not in axes]


def _coords(indices: np.ndarray, dims: Sequence[int]) -> tuple[list[np.ndarray], np.ndarray]:
    """Per-axis coordinates clamped into range (as intp), and a mask of in-bounds rows."""
    valid = np.ones(indices.shape[:-1], bool)
    cols = []
    for k, n in enumerate(dims):
        c = indices[..., k]
        if c.dtype == np.uint64:  # keep huge values huge when going to int64
            c = np.minimum(c, np.uint64(2**62))
        c = c.astype(np.int64)
        valid &= (c >= 0) & (c < n)
        cols.append(np.clip(c, 0, max(n - 1, 0)).astype(np.intp))
    return cols, valid


def _gather_impl(operand: np.ndarray, indices: np.ndarray, *, axes, mode):
    rest = _rest(operand.ndim, axes)
    batch = indices.shape[:-1]
    out_shape = batch + tuple(operand.shape[i] for i in rest)
    if any(operand.shape[a] == 0 for a in axes):
        return np.zeros(out_shape, operand.dtype)
    if not axes:
        return np.broadcast_to(operand, out_shape)
    cols, valid = _coords(indices, [operand.shape[a] for a in axes])
    out = np.transpose(operand, list(axes) + rest)[tuple(cols)]
    if mode == "fill_or_drop":
        mask = valid.reshape(batch + (1,) * len(rest))
        out = np.where(mask, out, np.zeros((), operand.dtype))
    return out


def _scatter_impl(operand, indices, updates, *, axes, mode, accumulate: bool):
    out = operand.copy()
    if any(operand.shape[a] == 0 for a in axes):
        return out
    if axes:
        target = np.transpose(out, list(axes) + _rest(operand.ndim, axes))  # a view of out
        cols, valid = _coords(indices, [operand.shape[a] for a in axes])
    else:  # every row addresses the whole operand: index a leading axis of size 1
        target = out[None]
        cols, valid = [np.zeros(indices.shape[:-1], np.intp)], np.ones(indices.shape[:-1], bool)
    if mode == "fill_or_drop":
        cols, updates = [c[valid] for c in cols], updates[valid]
    if accumulate:
        np.add.at(target, tuple(cols), updates)
    else:  # numpy assigns rows in order, so the last duplicate wins
        target[tuple(cols)] = updates
    return out


# ---- shape rules -------------------------------------------------------------------------------


def _check_indices(name: str, operand: ShapedArray, indices: ShapedArray, axes, extra="") -> None:
    what = f"operand {operand.str_short()}, indices {indices.str_short()}{extra}, axes {axes}"
    if not dtypes.is_int(indices.dtype):
        raise BluTypeError(with_user_line(f"{name}: indices must have an integer dtype ({what})"))
    if len(set(axes)) != len(axes) or any(not 0 <= a < operand.ndim for a in axes):
        raise BluValueError(with_user_line(f"{name}: axes must be distinct axes ({what})"))
    if indices.ndim == 0 or indices.shape[-1] != len(axes):
        raise BluShapeError(
            with_user_line(
                f"{name}: indices must have shape batch_shape + ({len(axes)},), one coordinate "
                f"per axis ({what})"
            )
        )


def _gather_shape(operand: ShapedArray, indices: ShapedArray, axes) -> tuple[int, ...]:
    rest = _rest(operand.ndim, axes)
    return indices.shape[:-1] + tuple(operand.shape[i] for i in rest)


gather_p = Primitive("gather")
gather_p.def_impl(_gather_impl)


@gather_p.def_abstract_eval
def _gather_abstract_eval(operand: ShapedArray, indices: ShapedArray, *, axes, mode):
    _check_indices("gather", operand, indices, axes)
    return ShapedArray(_gather_shape(operand, indices, axes), operand.dtype, operand.weak_type)


def _scatter_abstract_eval(name: str):
    def rule(operand: ShapedArray, indices: ShapedArray, updates: ShapedArray, *, axes, mode):
        extra = f", updates {updates.str_short()}"
        _check_indices(name, operand, indices, axes, extra)
        want = _gather_shape(operand, indices, axes)
        if updates.shape != want:
            raise BluShapeError(
                with_user_line(
                    f"{name}: updates must have shape batch_shape + rest_shape = {want} "
                    f"(operand {operand.str_short()}, indices {indices.str_short()}{extra}, "
                    f"axes {axes})"
                )
            )
        if updates.dtype != operand.dtype:
            raise BluTypeError(
                with_user_line(
                    f"{name}: updates {updates.str_short()} must have the dtype of the operand "
                    f"{operand.str_short()}"
                )
            )
        return operand

    return rule


scatter_add_p = Primitive("scatter_add")
scatter_add_p.def_impl(lambda o, i, u, **p: _scatter_impl(o, i, u, accumulate=True, **p))
scatter_add_p.def_abstract_eval(_scatter_abstract_eval("scatter_add"))

scatter_p = Primitive("scatter")
scatter_p.def_impl(lambda o, i, u, **p: _scatter_impl(o, i, u, accumulate=False, **p))
scatter_p.def_abstract_eval(_scatter_abstract_eval("scatter"))

# ---- differentiation ---------------------------------------------------------------------------

lin_jvp(gather_p, (0,))
lin_jvp(scatter_add_p, (0, 2))
lin_jvp(scatter_p, (0, 2))  # overwriting is linear in (operand, updates) jointly


@gather_p.def_transpose
def _gather_transpose(ct, operand, indices, *, axes, mode):
    zeros = full(operand.aval.shape, 0, operand.aval.dtype)
    return [scatter_add_p.bind(zeros, indices, ct, axes=axes, mode=mode), None]


@scatter_add_p.def_transpose
def _scatter_add_transpose(ct, operand, indices, updates, *, axes, mode):
    ct_u = gather_p.bind(ct, indices, axes=axes, mode=mode) if is_undefined(updates) else None
    return [ct if is_undefined(operand) else None, None, ct_u]


@scatter_p.def_transpose
def _scatter_transpose(ct, operand, indices, updates, *, axes, mode):
    ct_o = ct_u = None
    if is_undefined(operand):  # overwritten positions get no cotangent
        u_aval = updates.aval if is_undefined(updates) else get_aval(updates)
        zeros = full(u_aval.shape, 0, u_aval.dtype)
        ct_o = scatter_p.bind(ct, indices, zeros, axes=axes, mode=mode)
    if is_undefined(updates):
        ct_u = gather_p.bind(ct, indices, axes=axes, mode=mode)
        if not _static_unique(indices):
            ct_u = _only_kept_rows(ct_u, operand, indices, updates, axes, mode)
    return [ct_o, None, ct_u]


def _static_unique(indices: Any) -> bool:
    """Whether ``indices`` are constants whose rows are all distinct (no write can be lost)."""
    if not isinstance(indices, np.ndarray):
        return False
    rows = indices.reshape(-1, indices.shape[-1]) if indices.ndim else indices.reshape(1, 1)
    return len(np.unique(rows, axis=0)) == rows.shape[0]


def _only_kept_rows(ct_u: Any, operand: Any, indices: Any, updates: Any, axes, mode) -> Any:
    """``ct_u`` zeroed on the update rows whose write was overwritten by a later duplicate: the
    rows' numbers are scattered with the same indices (so the same row wins) and read back."""
    o_aval = operand.aval if is_undefined(operand) else get_aval(operand)
    u_aval = updates.aval if is_undefined(updates) else get_aval(updates)
    nb = get_aval(indices).ndim - 1
    batch = u_aval.shape[:nb]
    row = reshape(iota(dtypes.int32, (int(np.prod(batch, dtype=np.int64)),), 0), batch)
    row = broadcast_in_dim(row, u_aval.shape, tuple(range(nb)))
    winner = scatter_p.bind(
        full(o_aval.shape, -1, dtypes.int32), indices, row, axes=axes, mode=mode
    )
    kept = ew.eq(gather_p.bind(winner, indices, axes=axes, mode=mode), row)
    return ew.select(kept, ct_u, full(u_aval.shape, 0, u_aval.dtype))


# ---- batching ----------------------------------------------------------------------------------


def _shifted(axes: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(a + 1 for a in axes)


def _with_batch_coordinate(indices: Any, axis_size: int) -> Any:
    """Indices ``(B, ..., K)`` -> ``(B, ..., K + 1)`` whose first coordinate is the row's batch
    member, for an operand whose batch axis is in front."""
    aval = get_aval(indices)
    if axis_size - 1 > np.iinfo(aval.dtype).max:
        indices = ew.convert_element_type(indices, dtypes.int64)
    dt = get_aval(indices).dtype
    member = iota(dt, aval.shape[:-1] + (1,), 0)
    return concatenate([member, indices], aval.ndim - 1)


@gather_p.def_batch
def _gather_batch(axis_size, args, dims, *, axes, mode):
    (operand, indices), (od, idd) = args, dims
    if idd is None:  # the batch axis is the first of the operand's untouched axes
        operand = moveaxis(operand, od, 0)
        out = gather_p.bind(operand, indices, axes=_shifted(axes), mode=mode)
        return out, get_aval(indices).ndim - 1
    indices = moveaxis(indices, idd, 0)
    if od is None:  # the batch axis is part of batch_shape
        return gather_p.bind(operand, indices, axes=axes, mode=mode), 0
    operand = moveaxis(operand, od, 0)
    indices = _with_batch_coordinate(indices, axis_size)
    return gather_p.bind(operand, indices, axes=(0,) + _shifted(axes), mode=mode), 0


def _scatter_batch_rule(prim: Primitive):
    def rule(axis_size, args, dims, *, axes, mode):
        (operand, indices, updates), (od, idd, ud) = args, dims
        operand = bdim_to_front(operand, od, axis_size)
        updates = bdim_to_front(updates, ud, axis_size)
        if idd is None:
            # updates: batch_shape + (B,) + rest, B being the operand's first untouched axis
            updates = moveaxis(updates, 0, get_aval(indices).ndim - 1)
            return prim.bind(operand, indices, updates, axes=_shifted(axes), mode=mode), 0
        indices = _with_batch_coordinate(moveaxis(indices, idd, 0), axis_size)
        return prim.bind(operand, indices, updates, axes=(0,) + _shifted(axes), mode=mode), 0

    prim.def_batch(rule)


_scatter_batch_rule(scatter_add_p)
_scatter_batch_rule(scatter_p)


def grid_indices(
    starts: Sequence[Any], sizes: Sequence[int], axis_size: int, member: bool = True
) -> Any:
    """The coordinates of a per-batch-member window: ``(B, *sizes, 1 + len(sizes))`` indices
    whose row ``(b, i...)`` is ``(b, starts[0][b] + i_0, ...)`` (without the leading ``b`` when
    not ``member``), for ``starts`` of shape ``(B,)`` and one int dtype. Used by the batching
    rules of dynamic_slice and dynamic_update_slice."""
    dt = get_aval(starts[0]).dtype
    shape = (axis_size,) + tuple(sizes) + (1,)
    cols = [iota(dt, shape, 0)] if member else []
    for k, s in enumerate(starts):
        cols.append(ew.add(broadcast_in_dim(s, shape, (0,)), iota(dt, shape, k + 1)))
    return concatenate(cols, len(shape) - 1)


# ---- the lax functions -------------------------------------------------------------------------


def _prepare(name: str, operand: Any, indices: Any, axes: Any) -> tuple[Any, tuple[int, ...]]:
    if isinstance(indices, (list, tuple)):
        indices = np.asarray(indices)
    nd = get_aval(operand).ndim
    axes = (axes,) if isinstance(axes, (int, np.integer)) else tuple(axes)
    if any(not -nd <= int(a) < nd for a in axes):
        raise BluValueError(
            with_user_line(f"{name}: axes {axes} out of range for an operand of rank {nd}")
        )
    return indices, tuple(int(a) % nd for a in axes)


def gather(operand: Any, indices: Any, *, axes: Sequence[int], mode: str = "clip") -> Any:
    """Read the operand at integer coordinates (the module docstring has the full semantic).

    Args:
        operand: array of any dtype.
        indices: integer array of shape ``batch_shape + (len(axes),)``; ``indices[b..., k]`` is
            the coordinate on axis ``axes[k]``.
        axes: distinct operand axes (negative counts from the end), in any order.
        mode: ``'clip'`` (default; out-of-bounds coordinates are clamped, as XLA does) or
            ``'fill'`` (out-of-bounds rows read 0).

    Returns:
        array of shape ``batch_shape + [operand dims not in axes, in order]``, operand's dtype.

    Example:
        Embedding lookup: ``gather(table, ids[..., None], axes=(0,))`` has shape
        ``ids.shape + (d_model,)`` for a ``(vocab, d_model)`` table.

    Raises:
        BluTypeError: indices are not integers. BluShapeError: the last indices dim is not
        ``len(axes)``. BluValueError: repeated or out-of-range axes, unknown mode.
    """
    indices, axes = _prepare("gather", operand, indices, axes)
    return gather_p.bind(operand, indices, axes=axes, mode=_mode(mode))


def scatter_add(
    operand: Any, indices: Any, updates: Any, *, axes: Sequence[int], mode: str = "drop"
) -> Any:
    """Add each row of ``updates`` into the operand at its coordinates (the transpose of gather).

    Args:
        operand: array.
        indices: integer array of shape ``batch_shape + (len(axes),)`` (as for ``gather``).
        updates: array of gather's output shape ``batch_shape + rest_shape``, operand's dtype.
        axes: distinct operand axes.
        mode: ``'drop'`` (default; rows with an out-of-bounds coordinate are skipped, as in JAX)
            or ``'clip'`` (coordinates are clamped).

    Returns:
        operand plus the updates; duplicate coordinates accumulate (like ``np.add.at``).
    """
    indices, axes = _prepare("scatter_add", operand, indices, axes)
    return scatter_add_p.bind(operand, indices, updates, axes=axes, mode=_mode(mode))


def scatter(
    operand: Any, indices: Any, updates: Any, *, axes: Sequence[int], mode: str = "drop"
) -> Any:
    """Write each row of ``updates`` into the operand at its coordinates (``x.at[i].set(u)``).

    Arguments as for ``scatter_add``. For duplicate coordinates the last row wins. The JVP is
    exact (overwriting is linear in operand and updates together); so is the transpose: with
    duplicate coordinates only the row that was kept receives the cotangent.
    """
    indices, axes = _prepare("scatter", operand, indices, axes)
    return scatter_p.bind(operand, indices, updates, axes=axes, mode=_mode(mode))
