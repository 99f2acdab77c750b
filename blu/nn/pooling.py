"""Pooling over the spatial axes of ``(batch..., spatial..., features)`` arrays (flax.linen's
``max_pool``, ``avg_pool`` and ``min_pool``), as ``lax.reduce_window``: the windowed max, sum
and min primitives, differentiable, batchable and jittable."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

import blu.numpy as bnp
from blu import lax
from blu.core import dtypes
from blu.core.errors import BluShapeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.lax.windowed import WINDOW_OFFSETS, identity

__all__ = ["POOL_OFFSETS", "avg_pool", "max_pool", "min_pool"]

# the ``checkpoint_name`` of max (and min) pooling's chosen window offsets, one byte an output:
# ``checkpoint_policies.save_only_these_names(POOL_OFFSETS)`` keeps them for the backward pass
# of a rematerialized block, which then does not recompute the pooled input to find them
POOL_OFFSETS = WINDOW_OFFSETS


def _pool(
    inputs: Any,
    monoid: str,
    window_shape: Sequence[int],
    strides: Sequence[int] | None,
    padding: Any,
    name: str,
) -> Any:
    """``reduce_window`` over the ``len(window_shape)`` axes before the last one."""
    x = bnp.asarray(inputs)
    shape = get_aval(x).shape
    window = tuple(int(w) for w in window_shape)
    s = len(window)
    strides = (1,) * s if strides is None else tuple(int(v) for v in strides)
    if len(strides) != s or len(shape) < s + 1:
        raise BluShapeError(
            with_user_line(
                f"{name}: inputs {shape} need {s} spatial axes before the features, and strides "
                f"{strides} one per window axis {window}"
            )
        )
    nb = len(shape) - s - 1  # leading batch axes (none: one unbatched example)
    if not isinstance(padding, str):
        padding = tuple(tuple(int(v) for v in p) for p in padding)
        if len(padding) != s or any(len(p) != 2 for p in padding):
            raise BluValueError(
                with_user_line(
                    f"{name}: padding must be 'SAME', 'VALID' or {s} (low, high) "
                    f"pairs, got {padding!r}"
                )
            )
        padding = ((0, 0),) * nb + padding + ((0, 0),)
    elif padding.upper() not in ("SAME", "VALID", "SAME_LOWER"):
        raise BluValueError(with_user_line(f"{name}: unknown padding {padding!r}"))
    op = {"max": lax.max, "min": lax.min, "sum": lax.add}[monoid]
    init = identity(monoid, get_aval(x).dtype)  # -inf / +inf / 0 (integer: the extremes)
    return lax.reduce_window(
        x,
        init,
        op,
        (1,) * nb + window + (1,),
        (1,) * nb + strides + (1,),
        padding,
    )


def max_pool(
    inputs: Any,
    window_shape: Sequence[int],
    strides: Sequence[int] | None = None,
    padding: Any = "VALID",
) -> Any:
    """The maximum of each window (``flax.linen.max_pool``).

    Args:
        inputs: ``(batch..., spatial..., features)``, e.g. NHWC; no batch axis is one example.
        window_shape: the window's size per spatial axis, e.g. ``(2, 2)``.
        strides: per spatial axis (default 1).
        padding: ``"SAME"``, ``"VALID"`` or one ``(low, high)`` pair per spatial axis (pads
            never win: they hold ``-inf``).

    Returns:
        The pooled array, ``inputs``' dtype. Its gradient reaches each window's first maximum
        (the offsets found in the forward pass are named ``POOL_OFFSETS`` for remat policies).

    Raises:
        BluShapeError: too few axes or strides for the window. BluValueError: bad padding.
    """
    return _pool(inputs, "max", window_shape, strides, padding, "max_pool")


def min_pool(
    inputs: Any,
    window_shape: Sequence[int],
    strides: Sequence[int] | None = None,
    padding: Any = "VALID",
) -> Any:
    """The minimum of each window (``flax.linen.min_pool``); arguments as ``max_pool``'s."""
    return _pool(inputs, "min", window_shape, strides, padding, "min_pool")


def avg_pool(
    inputs: Any,
    window_shape: Sequence[int],
    strides: Sequence[int] | None = None,
    padding: Any = "VALID",
    count_include_pad: bool = True,
) -> Any:
    """The mean of each window (``flax.linen.avg_pool``); arguments as ``max_pool``'s.

    Args:
        count_include_pad: divide by the window's size (padding counted as zeros, the
            default); False: by the number of input elements in each window.

    Returns:
        The pooled array (a float dtype).
    """
    x = bnp.asarray(inputs)
    if not dtypes.is_inexact(get_aval(x).dtype):
        x = x.astype(bnp.float32)
    y = _pool(x, "sum", window_shape, strides, padding, "avg_pool")
    if count_include_pad:
        return y / float(np.prod(window_shape))
    shape = get_aval(x).shape
    ones = np.ones(
        (1,) * (len(shape) - len(window_shape) - 1) + shape[-len(window_shape) - 1 : -1] + (1,),
        np.dtype(get_aval(x).dtype),
    )
    return y / _pool(ones, "sum", window_shape, strides, padding, "avg_pool")
