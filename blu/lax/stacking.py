"""``jax.lax``'s array helpers over blu's shape primitives (no primitives of their own):
``stack`` (``broadcast_in_dim`` of each operand, one ``concatenate``), ``unstack`` (static
slices), ``tile`` (one ``broadcast_in_dim`` and a ``reshape``), ``broadcast_like``,
``broadcast_shapes`` (numpy's rule on static shapes), ``dtype`` and ``empty`` (zeros)."""

from __future__ import annotations

import itertools
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core.aval import ShapedArray
from blu.core.errors import BluShapeError, BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.lax._base import normalize_axis
from blu.lax._operands import as_operands
from blu.lax.shapes import broadcast_in_dim, canonical_shape, concatenate, full, reshape
from blu.lax.slicing import index_in_dim

__all__ = ["broadcast_like", "broadcast_shapes", "dtype", "empty", "stack", "tile", "unstack"]


def dtype(x: Any) -> np.dtype:
    """The dtype blu gives ``x`` (JAX's ``lax.dtype``): an array's or numpy scalar's own, a
    Python scalar's default (``1.0`` -> float32, ``1`` -> int32, ``1j`` -> complex64), or the
    dtype a dtype-like names (``float`` -> float32, ``"bfloat16"``).

    Raises:
        BluTypeError: not a dtype blu supports.
    """
    if isinstance(x, (bool, int, float, complex)) and not isinstance(x, np.generic):
        return dtypes.dtype_and_weak(x)[0]
    if hasattr(x, "dtype") and not isinstance(x, type):
        return dtypes.canonicalize(x.dtype)
    return dtypes.canonicalize(x)


def _ints(values: Any, what: str) -> tuple[int, ...]:
    """``values`` as a tuple of Python ints; a BluTypeError naming ``what`` for a float, a
    string or a non-sequence."""
    try:
        return tuple(operator.index(v) for v in values)
    except TypeError as e:
        raise BluTypeError(
            with_user_line(f"{what} must be a sequence of ints, got {values!r}")
        ) from e


def empty(shape: Sequence[int] | int, dtype: Any) -> Any:
    """An array of ``shape`` and ``dtype`` whose values are not specified (JAX's
    ``lax.empty``; blu gives zeros)."""
    shape = (shape,) if isinstance(shape, int) else shape
    return full(canonical_shape(shape), 0, dtypes.canonicalize(dtype))


def broadcast_shapes(*shapes: Sequence[int]) -> tuple[int, ...]:
    """numpy's broadcast of static shapes (JAX's ``lax.broadcast_shapes``): ranks aligned at
    the end, a size 1 stretching to the other size.

    Raises:
        BluShapeError: no shapes, or two sizes other than 1 that differ on one axis.
    """
    if not shapes:
        raise BluShapeError(with_user_line("broadcast_shapes: needs at least one shape"))
    shapes = tuple(_ints(s, "broadcast_shapes: a shape") for s in shapes)
    out = []
    for sizes in itertools.zip_longest(*(reversed(s) for s in shapes), fillvalue=1):
        big = {d for d in sizes if d != 1}
        if len(big) > 1:
            raise BluShapeError(
                with_user_line(
                    f"broadcast_shapes: incompatible shapes {', '.join(map(str, shapes))}"
                )
            )
        out.append(big.pop() if big else 1)
    return tuple(reversed(out))


def broadcast_like(arr: Any, like_arr: Any) -> Any:
    """``arr`` broadcast (numpy's rule) to the shape of ``like_arr`` (only its shape is read).

    Raises:
        BluShapeError: ``arr``'s shape does not broadcast to that shape.
    """
    (arr,) = as_operands(arr)
    shape, target = get_aval(arr).shape, get_aval(like_arr).shape
    lead = len(target) - len(shape)
    if lead < 0 or any(d not in (1, t) for d, t in zip(shape, target[lead:])):
        raise BluShapeError(
            with_user_line(f"broadcast_like: shape {shape} does not broadcast to {target}")
        )
    return broadcast_in_dim(arr, target, tuple(range(lead, len(target))))


def stack(operands: Sequence[Any], axis: int = 0) -> Any:
    """Join arrays of one shape and dtype along a new axis ``axis`` (JAX's ``lax.stack``; lax
    does not promote: Python scalars take the arrays' dtype).

    Raises:
        BluValueError: no operands, or ``axis`` out of range. BluShapeError: unequal shapes.
        BluTypeError: unequal dtypes.
    """
    operands = list(operands)
    if not operands:
        raise BluValueError(with_user_line("stack: needs at least one operand"))
    given = [get_aval(x).shape for x in operands]  # before as_operands broadcasts scalars
    operands = as_operands(*operands)
    avals = [get_aval(x) for x in operands]
    if len({a.shape for a in avals}) != 1 or len(set(given)) != 1:
        raise BluShapeError(
            with_user_line(
                "stack: operands must have equal shapes, got "
                + ", ".join(ShapedArray(g, a.dtype).str_short() for a, g in zip(avals, given))
                + " (a scalar is not broadcast)"
            )
        )
    if len({a.dtype for a in avals}) != 1:
        raise BluTypeError(
            with_user_line(
                "stack: operands must have equal dtypes (lax does not promote), got "
                + ", ".join(a.str_short() for a in avals)
            )
        )
    shape = avals[0].shape
    axis = normalize_axis(axis, len(shape) + 1, "stack")
    new_shape = shape[:axis] + (1,) + shape[axis:]
    dims = tuple(d for d in range(len(new_shape)) if d != axis)
    return concatenate([broadcast_in_dim(x, new_shape, dims) for x in operands], axis)


def unstack(x: Any, axis: int = 0) -> tuple:
    """The slices of ``x`` along ``axis``, that axis dropped (JAX's ``lax.unstack``).

    Raises:
        BluShapeError: ``x`` is 0-d. BluValueError: ``axis`` out of range.
    """
    (x,) = as_operands(x)
    aval = get_aval(x)
    if aval.ndim == 0:
        raise BluShapeError(
            with_user_line(f"unstack: x must have rank >= 1, got {aval.str_short()}")
        )
    axis = normalize_axis(axis, aval.ndim, "unstack")
    return tuple(index_in_dim(x, i, axis, keepdims=False) for i in range(aval.shape[axis]))


def tile(operand: Any, reps: Sequence[int]) -> Any:
    """``operand`` repeated ``reps[i]`` times along each axis ``i`` (JAX's ``lax.tile``:
    ``len(reps)`` must equal the rank).

    Raises:
        BluTypeError: ``len(reps)`` is not the rank. BluValueError: a negative repeat.
    """
    (operand,) = as_operands(operand)
    aval = get_aval(operand)
    reps = _ints(reps, f"tile: reps for {aval.str_short()}")
    if len(reps) != aval.ndim:
        raise BluTypeError(
            with_user_line(f"tile: reps {reps} must have one entry per axis of {aval.str_short()}")
        )
    if any(r < 0 for r in reps):
        raise BluValueError(with_user_line(f"tile: reps {reps} must be >= 0"))
    wide = tuple(v for r, d in zip(reps, aval.shape) for v in (r, d))
    out = broadcast_in_dim(operand, wide, tuple(range(1, 2 * aval.ndim, 2)))
    return reshape(out, tuple(r * d for r, d in zip(reps, aval.shape)))
