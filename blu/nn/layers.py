"""Layers as pure functions: ``linear``, ``embedding``, ``one_hot`` and ``dropout``."""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

import blu.numpy as bnp
from blu import lax, random
from blu.core import dtypes
from blu.core.errors import BluShapeError, BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import Tracer, get_aval
from blu.nn.operands import _axes

__all__ = ["dropout", "embedding", "linear", "one_hot"]


def linear(x: Any, w: Any, b: Any = None) -> Any:
    """An affine map ``x @ w + b``.

    Args:
        x: ``(..., in)``.
        w: ``(in, out)``.
        b: optional ``(out,)``.

    Returns:
        ``(..., out)`` in the promoted dtype of the operands.

    Raises:
        BluShapeError: ``x``'s last axis is not ``w``'s first, or ``b`` is not ``(out,)``.
    """
    x, w = bnp.asarray(x), bnp.asarray(w)
    if w.ndim != 2 or x.ndim < 1 or x.shape[-1] != w.shape[0]:
        raise BluShapeError(
            with_user_line(
                f"nn.linear: x {get_aval(x).str_short()} and w {get_aval(w).str_short()} do not "
                "fit: w must be (in, out) with in = x.shape[-1]"
            )
        )
    y = bnp.matmul(x, w)
    if b is not None:
        b = bnp.asarray(b)
        if b.shape != (w.shape[1],):
            raise BluShapeError(
                with_user_line(
                    f"nn.linear: bias {get_aval(b).str_short()} must have shape ({w.shape[1]},)"
                )
            )
        y = y + b
    return y


def _check_int(x: Any, what: str, name: str) -> Any:
    x = bnp.asarray(x)
    if not dtypes.is_int(x.dtype):
        raise BluTypeError(
            with_user_line(f"nn.{name}: {what} must be integers, got {get_aval(x).str_short()}")
        )
    return x


def embedding(table: Any, ids: Any) -> Any:
    """Look up rows of ``table``: ``table[ids]``.

    Args:
        table: ``(num_embeddings, dim)``.
        ids: integer array of any shape, values in ``[0, num_embeddings)``.

    Returns:
        ``ids.shape + (dim,)`` in ``table``'s dtype. The gradient w.r.t. ``table`` scatter-adds
        into the looked-up rows.
    """
    table = bnp.asarray(table)
    ids = _check_int(ids, "ids", "embedding")
    if table.ndim != 2:
        raise BluShapeError(
            with_user_line(
                "nn.embedding: table must be (num_embeddings, dim), got "
                f"{get_aval(table).str_short()}"
            )
        )
    return bnp.take(table, ids, axis=0)


def one_hot(labels: Any, num_classes: int, dtype: Any = dtypes.float32, *, axis: int = -1) -> Any:
    """One-hot encoding: ``out[..., c] = (labels[...] == c)``.

    Args:
        labels: integer array; values outside ``[0, num_classes)`` give all-zero rows.
        num_classes: the length of the new axis.
        dtype: output dtype.
        axis: where the new axis goes in the result (``jax.nn.one_hot``'s ``axis``).

    Returns:
        ``labels.shape`` with ``num_classes`` inserted at ``axis``, of ``dtype``.

    Raises:
        BluValueError: ``axis`` is out of range for ``labels.ndim + 1``, or ``num_classes < 0``.
        BluTypeError: ``num_classes`` is not an integer.
    """
    labels = _check_int(labels, "labels", "one_hot")
    if isinstance(num_classes, Tracer):
        num_classes = int(num_classes)  # a ConcretizationError saying what to do
    try:  # JAX's operator.index: 2.5 was truncated to 2 and None was Python's TypeError
        if np.ndim(num_classes) != 0:  # operator.index refuses a 1-element (1,) array too
            raise TypeError
        n = operator.index(np.asarray(num_classes).item())
    except TypeError:
        raise BluTypeError(with_user_line(f"nn.one_hot: num_classes must be an int, got "
                                          f"{num_classes!r}")) from None  # fmt: skip
    if n < 0:
        raise BluValueError(with_user_line(f"nn.one_hot: num_classes {n} < 0"))
    labels = labels.astype(dtypes.int32) if labels.dtype.itemsize < 4 else labels  # no wrap
    shape = labels.shape + (n,)
    classes = lax.iota(labels.dtype, shape, len(shape) - 1)
    out = (bnp.expand_dims(labels, -1) == classes).astype(dtype)
    (ax,) = _axes(axis, len(shape), "one_hot")
    return out if ax == len(shape) - 1 else bnp.moveaxis(out, -1, ax)


def dropout(key: Any, x: Any, rate: float, deterministic: bool = False) -> Any:
    """Inverted dropout (Srivastava et al. 2014): zero each entry with probability ``rate`` and
    scale the survivors by ``1 / (1 - rate)``, so the expectation is ``x``.

    Args:
        key: ``uint32[2]`` PRNG key (``blu.random.key``).
        x: float array.
        rate: drop probability in ``[0, 1]`` (a Python float).
        deterministic: return ``x`` unchanged (evaluation mode).

    Returns:
        An array of ``x``'s shape and dtype.

    Raises:
        BluValueError: ``rate`` outside ``[0, 1]``.
    """
    x = bnp.asarray(x)
    rate = float(rate)
    if not 0.0 <= rate <= 1.0:
        raise BluValueError(with_user_line(f"nn.dropout: rate must be in [0, 1], got {rate}"))
    if deterministic or rate == 0.0:
        return x
    if rate == 1.0:
        return bnp.zeros_like(x)
    # keep an entry iff its 32 random bits fall below (1 - rate) * 2**32: one integer compare
    threshold = min(round((1.0 - rate) * 2.0**32), 2**32 - 1)
    keep = random.bits(key, x.shape) < np.uint32(threshold)
    return bnp.where(keep, x * (1.0 / (1.0 - rate)), bnp.zeros_like(x))
