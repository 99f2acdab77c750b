"""The softmax family: ``logsumexp``, ``softmax`` and ``log_softmax``, computed stably (shifted by
the max, in float32 for bfloat16/float16); their ``b=``/``return_sign=``/``where=`` forms are in
``logsumexp_weighted`` and ``softmax_masked``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

import blu.numpy as bnp
from blu.nn.logsumexp_weighted import weighted_logsumexp
from blu.nn.operands import _axes, _float_operand, _stable_max, _upcast
from blu.nn.softmax_masked import masked_softmax

__all__ = ["log_softmax", "logsumexp", "softmax"]


def logsumexp(
    x: Any,
    axis: int | Sequence[int] | None = None,
    b: Any = None,
    keepdims: bool = False,
    return_sign: bool = False,
    where: Any = None,
) -> Any:
    """``log(sum(exp(x)))`` over ``axis``, computed stably (shifted by the max).

    ``-inf`` entries contribute nothing and get a zero (finite) gradient; the gradient is
    ``softmax(x)`` over the axes. An empty reduction gives ``-inf``; a group of only ``-inf``
    gives ``-inf`` with gradient 0 (docs/conventions.md).

    Args:
        x: float array (bfloat16/float16 are computed in float32).
        axis: an axis, a tuple of axes, or None for all.
        b: real weights broadcast with ``x``: ``log(|sum(b * exp(x))|)`` (JAX's ``b=``); the
            axes are those of the two shapes' broadcast, which may be larger than ``x``'s.
            Third, as in JAX's and SciPy's signatures (``logsumexp(a, axis, b, keepdims)``).
        keepdims: keep the reduced axes as size 1.
        return_sign: also return the sum's sign; without it a negative sum gives NaN.
        where: a boolean mask broadcast with ``x`` (and ``b``); False entries are left out.

    Returns:
        ``x``'s dtype (promoted with ``b``'s), of the broadcast shape of ``x``, ``b`` and
        ``where``, the axes removed (or size 1); ``(out, sign)`` with ``return_sign``.

    Raises:
        BluTypeError: complex ``b``.
        BluShapeError: ``b`` or ``where`` does not broadcast with ``x``.
        BluValueError: an axis out of range or repeated.
    """
    x = _float_operand(x)
    if b is not None or return_sign or where is not None:
        return weighted_logsumexp(x, axis, keepdims, b, return_sign, where)
    axes = _axes(axis, x.ndim, "logsumexp")
    shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    if any(x.shape[a] == 0 for a in axes):
        out = bnp.full(shape, -np.inf, x.dtype)
    else:
        x32 = _upcast(x)
        m = _stable_max(x32, axes)
        s = bnp.sum(bnp.exp(x32 - m), axis=axes, keepdims=True)
        # all -inf: s is 0; log(1) in its place keeps the gradient finite (0, not 0/0)
        empty = bnp.equal(s, 0)
        out = bnp.log(bnp.where(empty, bnp.ones_like(s), s)) + m
        out = bnp.where(empty, bnp.full_like(s, -np.inf), out).astype(x.dtype)
    if not keepdims:
        out = bnp.reshape(out, tuple(d for i, d in enumerate(x.shape) if i not in axes))
    return out


def softmax(x: Any, axis: int | Sequence[int] = -1, where: Any = None) -> Any:
    """``exp(x) / sum(exp(x))`` over ``axis``, computed stably; ``-inf`` entries give 0.

    Args:
        x: float array (bfloat16/float16 are computed in float32).
        axis: the normalized axis or axes (None: all).
        where: a boolean mask broadcast with ``x`` (JAX's ``where=``; a larger one gives the
            result its shape): False entries are left out of the sum and give 0 with gradient
            0; a group left empty gives 0s.

    Returns:
        An array of ``x``'s dtype and shape (broadcast with ``where``'s).

    Raises:
        BluShapeError: ``where`` does not broadcast with ``x``'s shape.
        BluValueError: an axis out of range or repeated.
    """
    x = _float_operand(x)
    if where is not None:
        return masked_softmax(x, axis, where, log=False)
    axes = _axes(axis, x.ndim, "softmax")  # (checked for empty x too)
    if x.size == 0:
        return x
    x32 = _upcast(x)
    e = bnp.exp(x32 - _stable_max(x32, axes))
    return (e / bnp.sum(e, axis=axes, keepdims=True)).astype(x.dtype)


def log_softmax(x: Any, axis: int | Sequence[int] = -1, where: Any = None) -> Any:
    """``x - logsumexp(x)`` over ``axis``, computed stably.

    Args:
        x: float array (bfloat16/float16 are computed in float32).
        axis: the normalized axis or axes (None: all).
        where: a boolean mask broadcast with ``x`` (JAX's ``where=``; a larger one gives the
            result its shape): False entries are left out of the sum and give ``-inf`` with
            gradient 0; a group left empty gives -infs.

    Returns:
        An array of ``x``'s dtype and shape (broadcast with ``where``'s).

    Raises:
        BluShapeError: ``where`` does not broadcast with ``x``'s shape.
        BluValueError: an axis out of range or repeated.
    """
    x = _float_operand(x)
    if where is not None:
        return masked_softmax(x, axis, where, log=True)
    axes = _axes(axis, x.ndim, "log_softmax")  # (checked for empty x too)
    if x.size == 0:
        return x
    x32 = _upcast(x)
    shifted = x32 - _stable_max(x32, axes)
    lse = bnp.log(bnp.sum(bnp.exp(shifted), axis=axes, keepdims=True))
    return (shifted - lse).astype(x.dtype)
