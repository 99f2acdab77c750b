"""``select_n`` (``jax.lax.select_n``): pick elementwise among n cases by a bool or integer
selector, as a chain of ``select`` primitives (so it differentiates, batches and fuses as they
do)."""

from __future__ import annotations

__all__ = ["select_n"]

from typing import Any

import numpy as np

from blu.core.errors import BluShapeError, BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.lax.elementwise import eq, operands, select
from blu.lax.shapes import broadcast_in_dim, full_like


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
