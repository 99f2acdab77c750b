"""``select_n`` (``jax.lax.select_n``): pick elementwise among n cases by a bool or integer
selector, as a chain of ``select`` primitives (so it differentiates, batches and fuses as they
do); and jax.lax's small helpers that are compositions of primitives (``clamp``,
``reciprocal``, ``broadcasted_iota``, ``collapse``, the ``bitwise_*`` spellings)."""

from __future__ import annotations

__all__ = [
    "bitwise_and",
    "bitwise_not",
    "bitwise_or",
    "bitwise_xor",
    "broadcasted_iota",
    "clamp",
    "collapse",
    "reciprocal",
    "select_n",
]

from collections.abc import Sequence
from typing import Any

import numpy as np

from blu.core.errors import BluShapeError, BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.lax.bits import and_, not_, or_, xor
from blu.lax.elementwise import div, eq, operands, select
from blu.lax.elementwise import max as lax_max
from blu.lax.elementwise import min as lax_min
from blu.lax.shapes import broadcast_in_dim, full_like, iota, reshape


def select_n(which: Any, *cases: Any) -> Any:
    """``cases[which]`` elementwise, as ``jax.lax.select_n``.

    Args:
        which: a bool array (then exactly two cases: ``False`` picks ``cases[0]``) or an
            integer array, of the cases' shape or a scalar; values outside
            ``[0, len(cases))`` give an unspecified case (as in JAX).
        *cases: one or more arrays of one shape and dtype.

    Returns:
        An array of the cases' shape and dtype.

    Raises:
        BluValueError: no case, or a bool ``which`` with more than two cases.
        BluTypeError: ``which`` is neither bool nor integer.
        BluShapeError: ``which`` is not a scalar and not of the cases' shape.
    """
    if not cases:
        raise BluValueError(with_user_line("select_n: needs at least one case"))
    cases = tuple(operands(*cases)) if len(cases) > 1 else cases
    w = get_aval(which)
    shape = get_aval(cases[0]).shape
    if w.shape not in ((), shape):
        raise BluShapeError(
            with_user_line(f"select_n: which has shape {w.shape}; the cases have shape {shape}")
        )
    if len(cases) == 1:
        return cases[0]
    if w.shape == () and shape != ():
        which = broadcast_in_dim(which, shape, ())
    if w.dtype == np.bool_:
        if len(cases) != 2:
            raise BluValueError(
                with_user_line(f"select_n: a bool which picks between 2 cases, got {len(cases)}")
            )
        return select(which, cases[1], cases[0])
    if not np.issubdtype(w.dtype, np.integer):
        raise BluTypeError(
            with_user_line(f"select_n: which must be bool or integer, got {w.dtype.name}")
        )
    out = cases[0]
    for i in range(1, len(cases)):
        out = select(eq(which, full_like(which, i)), cases[i], out)
    return out


# ---- more of jax.lax's small helpers: compositions of primitives -------------------------------


def bitwise_and(x: Any, y: Any) -> Any:
    """``jax.lax.bitwise_and``: ``and_`` (bool or integer operands of one dtype and shape)."""
    return and_(x, y)


def bitwise_or(x: Any, y: Any) -> Any:
    """``jax.lax.bitwise_or``: ``or_``."""
    return or_(x, y)


def bitwise_xor(x: Any, y: Any) -> Any:
    """``jax.lax.bitwise_xor``: ``xor``."""
    return xor(x, y)


def bitwise_not(x: Any) -> Any:
    """``jax.lax.bitwise_not``: ``not_``."""
    return not_(x)


def clamp(min: Any, x: Any, max: Any) -> Any:  # noqa: A002
    """``x`` clipped to ``[min, max]`` elementwise (``min``/``max`` scalars or of ``x``'s shape;
    one dtype), as ``jax.lax.clamp`` (note the argument order). A composition of ``max`` and
    ``min``: where ``x`` equals a bound exactly the gradient is split as theirs (1/2), where
    JAX's ``clamp`` primitive gives 0."""
    lo, x, hi = operands(min, x, max)  # Python scalar bounds take x's dtype (weak types)
    x_aval = get_aval(x)
    lo, hi = (
        broadcast_in_dim(b, x_aval.shape, ()) if get_aval(b).shape == () and x_aval.shape else b
        for b in (lo, hi)
    )
    return lax_min(lax_max(x, lo), hi)


def reciprocal(x: Any) -> Any:
    """``1 / x`` (floating or complex ``x``)."""
    return div(full_like(x, 1), x)


def broadcasted_iota(dtype: Any, shape: Sequence[int], dimension: int) -> Any:
    """``iota`` along ``dimension`` broadcast to ``shape`` (as ``jax.lax.broadcasted_iota``)."""
    shape = tuple(int(d) for d in shape)
    return broadcast_in_dim(iota(dtype, shape[dimension]), shape, (dimension,))


def collapse(operand: Any, start_dimension: int, stop_dimension: int | None = None) -> Any:
    """Merge dimensions ``[start, stop)`` into one (row-major), as ``jax.lax.collapse``."""
    shape = get_aval(operand).shape
    stop = len(shape) if stop_dimension is None else stop_dimension
    size = 1
    for d in shape[start_dimension:stop]:
        size *= d
    return reshape(operand, shape[:start_dimension] + (size,) + shape[stop:])
