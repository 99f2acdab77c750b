"""``jax.nn``'s ``log1mexp`` (``log(1 - exp(-x))``, Maechler's two branches) and ``logmeanexp``
(``logsumexp`` less the log of the count)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from blu import numpy as bnp
from blu.nn.operands import _axes, _float_operand
from blu.nn.softmax_family import logsumexp

__all__ = ["log1mexp", "logmeanexp"]

_LOG2 = math.log(2.0)


def log1mexp(x: Any) -> Any:
    """``log(1 - exp(-x))`` for ``x >= 0`` (as JAX's): ``log(-expm1(-x))`` up to ``log 2`` and
    ``log1p(-exp(-x))`` above (Maechler 2012), so neither small nor large ``x`` lose digits.
    ``-inf`` at 0, NaN for ``x < 0``; the derivative is ``1 / expm1(x)``."""
    x = _float_operand(x)
    # (where on the operands too: the branch not taken must not give NaN gradients)
    small = x <= _LOG2
    lo = bnp.log(-bnp.expm1(-bnp.where(small, x, _LOG2)))
    hi = bnp.log1p(-bnp.exp(-bnp.where(small, _LOG2, x)))
    return bnp.where(small, lo, hi)


def logmeanexp(
    x: Any,
    axis: int | Sequence[int] | None = None,
    where: Any = None,
    keepdims: bool = False,
) -> Any:
    """``log(mean(exp(x)))`` over ``axis`` (all by default), ``logsumexp(x) - log(n)`` with
    ``n`` the count of elements reduced (those where ``where`` is True), as JAX's. An empty
    reduction gives NaN (``-inf - log 0``).

    Raises:
        BluShapeError: ``where`` does not broadcast with ``x``.
        BluValueError: an axis out of range or repeated.
    """
    x = _float_operand(x)
    out = logsumexp(x, axis, keepdims=keepdims, where=where)
    if where is None:
        axes = _axes(axis, x.ndim, "logmeanexp")
        n = math.prod(x.shape[a] for a in axes)
        return out - math.log(n) if n else bnp.full_like(out, math.nan)
    mask = bnp.broadcast_to(
        bnp.asarray(where, bool), bnp.broadcast_shapes(x.shape, bnp.shape(where))
    )
    count = bnp.sum(mask, axis=axis, keepdims=keepdims).astype(out.dtype)
    return out - bnp.log(count)
