"""The operand, precision and axis helpers that ``blu.nn``'s functions share (float operands,
float32 statistics for bfloat16/float16, checked axes, the softmax family's stable shift)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

import blu.numpy as bnp
from blu import lax
from blu.core import dtypes
from blu.core.errors import BluShapeError, BluTypeError, BluValueError, with_user_line

_LOW_PRECISION = (dtypes.bfloat16, dtypes.float16)


def _float_operand(x: Any) -> Any:
    """``x`` as an array of a float dtype (integers and bools become float32).

    Raises:
        BluTypeError: complex ``x`` (a cast would drop the imaginary part).
    """
    x = bnp.asarray(x)
    if dtypes.is_complex(x.dtype):
        raise BluTypeError(
            with_user_line(
                f"nn: this function takes real input, got {x.dtype} (casting it to a float "
                "would drop the imaginary part; pass bnp.real(x) or bnp.abs(x) if meant)"
            )
        )
    if not dtypes.is_float(x.dtype):
        x = x.astype(dtypes.float32)
    return x


def _upcast(x: Any) -> Any:
    """bfloat16/float16 to float32 (for statistics); other floats unchanged."""
    return x.astype(dtypes.float32) if x.dtype in _LOW_PRECISION else x


def _axes(axis: int | Sequence[int] | None, ndim: int, name: str) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    if not isinstance(axis, (Sequence, np.ndarray)) or getattr(axis, "ndim", 1) == 0:
        axis = (axis,)
    axes = tuple(axis)
    out = []
    for a in axes:
        a = dtypes.index_int(a, f"nn.{name}: axis", "an int or a tuple of ints")  # not 1.5
        if not -ndim <= a < ndim:
            raise BluValueError(with_user_line(f"nn.{name}: axis {a} out of range for rank {ndim}"))
        out.append(int(a) % ndim)
    if len(set(out)) != len(out):
        raise BluValueError(with_user_line(f"nn.{name}: repeated axis in {axis}"))
    return tuple(sorted(out))


def _broadcast_shape(
    name: str, what: str, shape: tuple[int, ...], x_shape: tuple[int, ...], against: str = "x"
) -> tuple[int, ...]:
    """The shape ``x``'s and ``what``'s (a ``where=`` mask's, a ``b=`` weight's) broadcast to:
    as in JAX, a larger one gives the result its shape.

    Raises:
        BluShapeError: they do not broadcast (``against`` names ``x`` in the message).
    """
    try:
        return bnp.broadcast_shapes(x_shape, shape)
    except BluShapeError:
        raise BluShapeError(
            with_user_line(
                f"nn.{name}: {what} of shape {shape} does not broadcast with {against} of shape "
                f"{x_shape}"
            )
        ) from None


def _stable_max(x: Any, axes: tuple[int, ...]) -> Any:
    """The max over ``axes`` (kept as size-1 axes), with non-finite maxima (all -inf rows)
    replaced by 0 and no gradient: a shift that softmax-like functions are invariant to."""
    m = bnp.max(x, axis=axes, keepdims=True)
    m = bnp.where(bnp.isfinite(m), m, bnp.zeros_like(m))
    return lax.stop_gradient(m)
