"""``jax.scipy.ndimage``: ``map_coordinates`` (interpolation of an array at fractional
coordinates, orders 0 and 1), from ``blu.numpy`` gathers: as JAX's, one gather per corner of the
interpolation cell (2**ndim for order 1), weighted and summed."""

from __future__ import annotations

import functools
import itertools
import operator
from collections.abc import Sequence
from typing import Any

from blu import lax
from blu import numpy as bnp
from blu.core import dtypes
from blu.core.errors import BluShapeError, BluValueError, with_user_line
from blu.numpy._promote import asarray_operand, asarray_operand_in, to_inexact

__all__ = ["map_coordinates"]


def _mirror(index: Any, size: int) -> Any:
    """The whole-sample symmetric index (``d c b | a b c d | c b a``): a triangular wave of
    half-period ``size - 1``."""
    if size == 1:
        return bnp.zeros_like(index)
    s = size - 1
    return bnp.abs((index + s) % (2 * s) - s)


def _reflect(index: Any, size: int) -> Any:
    """The half-sample symmetric index (``d c b a | a b c d | d c b a``)."""
    return bnp.floor_divide(_mirror(2 * index + 1, 2 * size + 1) - 1, 2)


_FIXERS = {
    "constant": lambda index, size: bnp.clip(index, 0, size - 1),  # (masked to cval)
    "nearest": lambda index, size: bnp.clip(index, 0, size - 1),
    "wrap": lambda index, size: index % size,
    "mirror": _mirror,
    "reflect": _reflect,
}


def _nearest(c: Any) -> list:
    return [(lax.convert_element_type(lax.round(c), dtypes.int32), None)]


def _linear(c: Any) -> list:
    lower = bnp.floor(c)
    upper_weight = c - lower
    index = lax.convert_element_type(lower, dtypes.int32)
    return [(index, 1 - upper_weight), (index + 1, upper_weight)]


def map_coordinates(input: Any, coordinates: Sequence[Any], order: int, mode: str = "constant",
                    cval: Any = 0.0) -> Any:  # fmt: skip
    """``input`` interpolated at ``coordinates`` (``jax.scipy.ndimage.map_coordinates``).

    ``coordinates[d]`` holds the (fractional) indices along axis ``d``; the coordinate arrays
    broadcast together into the result's shape. ``order`` 0 takes the nearest sample (ties away
    from zero), 1 interpolates linearly between the 2**ndim neighbours. Samples outside
    ``input`` come from ``mode``: 'constant' (``cval``; a point between the edge and outside is
    interpolated between them, SciPy's 'grid-constant'), 'nearest' (the edge sample), 'wrap'
    (periodic, SciPy's 'grid-wrap'), 'mirror' (``c b | a b c | b a``) or 'reflect'
    (``b a | a b c | c b``). Integer inputs are rounded (ties away from zero).

    Differentiable in ``input``, ``coordinates`` (order 1) and ``cval``.

    Returns:
        An array of ``input``'s dtype and the coordinates' broadcast shape.

    Raises:
        BluValueError: ``order`` not 0 or 1, an unknown ``mode``, or not one coordinate array
            per axis of ``input``.
        BluShapeError: the coordinate arrays do not broadcast.
    """
    x = asarray_operand(input)
    coords = [asarray_operand(c) for c in coordinates]
    if len(coords) != x.ndim:
        raise BluValueError(
            with_user_line(
                f"map_coordinates: {len(coords)} coordinate arrays for an input of "
                f"{x.ndim} axes ({x.aval.str_short()}); one per axis is needed"
            )
        )
    if order not in (0, 1):
        raise BluValueError(
            with_user_line(f"map_coordinates: order must be 0 or 1 (JAX's), got {order!r}")
        )
    if mode not in _FIXERS:
        raise BluValueError(
            with_user_line(
                f"map_coordinates: mode must be one of {sorted(_FIXERS)} (JAX's), got {mode!r}"
            )
        )
    try:
        shape = bnp.broadcast_shapes(*[c.shape for c in coords])
    except BluShapeError:
        raise BluShapeError(
            with_user_line(
                "map_coordinates: the coordinate arrays' shapes "
                + ", ".join(str(c.shape) for c in coords)
                + " do not broadcast"
            )
        ) from None
    coords = [bnp.broadcast_to(to_inexact(c), shape) for c in coords]
    cval = lax.convert_element_type(asarray_operand_in(cval, x.dtype), x.dtype)
    nodes = _nearest if order == 0 else _linear
    fix = _FIXERS[mode]
    per_axis = []
    for c, size in zip(coords, x.shape):
        entries = []
        for index, weight in nodes(c):
            valid = (index >= 0) & (index < size) if mode == "constant" else None
            entries.append((fix(index, size), valid, weight))
        per_axis.append(entries)
    terms = []
    for corner in itertools.product(*per_axis):
        indices, valids, weights = zip(*corner)
        value = x[tuple(indices)] if indices else x
        valids = [v for v in valids if v is not None]
        if valids:
            value = bnp.where(functools.reduce(operator.and_, valids), value, cval)
        weights = [w for w in weights if w is not None]
        terms.append(functools.reduce(operator.mul, weights) * value if weights else value)
    out = functools.reduce(operator.add, terms)
    if not dtypes.is_inexact(x.dtype):
        out = lax.round(out)
    return out.astype(x.dtype)
