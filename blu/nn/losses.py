"""Losses: ``cross_entropy``, the softmax cross-entropy with integer labels (the output
projection fused with it is ``classifier``'s ``linear_cross_entropy``)."""

from __future__ import annotations

from typing import Any

import numpy as np

import blu.numpy as bnp
from blu import lax
from blu.core.errors import BluShapeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.nn.layers import _check_int
from blu.nn.operands import _float_operand, _stable_max, _upcast

__all__ = ["cross_entropy"]


def cross_entropy(
    logits: Any, labels: Any, reduction: str = "mean", ignore_index: int | None = None
) -> Any:
    """Softmax cross-entropy with integer labels: ``logsumexp(logits) - logits[label]``.

    Numerically stable for any finite logits (no probabilities are formed in the forward
    pass; the backward pass is ``softmax(logits) - one_hot(labels)``).

    Labels outside ``[0, num_classes)``: positions whose label equals ``ignore_index`` (as in
    PyTorch, e.g. padding) contribute a zero loss and a zero gradient and are left out of the
    "mean". Any other out-of-range label is an error: a ``BluValueError`` where the labels are
    concrete; under ``jit`` (traced labels, which cannot be checked) its loss is NaN and so is
    its gradient, so the mistake shows in the loss instead of training on a wrong target (the
    loss and its gradient always agree).

    Args:
        logits: ``(..., num_classes)`` floats.
        labels: ``(...)`` integers in ``[0, num_classes)`` (or ``ignore_index``).
        reduction: "mean" (over the positions not ignored) or "sum" over all positions, or
            "none".
        ignore_index: a label value marking positions to leave out (None: none).

    Returns:
        A scalar (or ``(...)`` for "none"), float32 for bfloat16/float16 logits, otherwise in
        the logits' dtype.

    Raises:
        BluShapeError: ``labels`` is not ``logits.shape[:-1]``; BluValueError: bad reduction,
        or a concrete label out of range.
    """
    if reduction not in ("mean", "sum", "none"):
        raise BluValueError(
            with_user_line(
                f"nn.cross_entropy: reduction must be mean, sum or none, not {reduction!r}"
            )
        )
    x = _upcast(_float_operand(logits))
    labels = _check_int(labels, "labels", "cross_entropy")
    if x.ndim < 1 or labels.shape != x.shape[:-1]:
        raise BluShapeError(
            with_user_line(
                f"nn.cross_entropy: labels {get_aval(labels).str_short()} must have the shape of "
                f"logits {get_aval(x).str_short()} without its last axis"
            )
        )
    n = x.shape[-1]
    _check_labels(labels, n, ignore_index)
    classes = lax.iota(labels.dtype, x.shape, x.ndim - 1)
    hit = bnp.expand_dims(labels, -1) == classes
    if n == 0:
        loss = bnp.full(labels.shape, np.inf, x.dtype)
    else:
        # both terms relative to the max: the picked logit's large magnitude cancels exactly
        shifted = x - _stable_max(x, (x.ndim - 1,))
        picked = bnp.sum(bnp.where(hit, shifted, bnp.zeros_like(shifted)), axis=-1)
        loss = bnp.log(bnp.sum(bnp.exp(shifted), axis=-1)) - picked
    bad = (labels < 0) | (labels >= n)
    kept = None
    if ignore_index is not None:
        ignored = labels == ignore_index
        bad = bad & ~ignored
        kept = ~ignored
        # a product, not a select: the ignored positions' gradient is zero too
        loss = loss * kept.astype(loss.dtype)
    # NaN times the loss: NaN value and NaN gradient at an unchecked bad label
    loss = loss * bnp.where(bad, np.nan, 1.0).astype(loss.dtype)
    if reduction == "mean":
        if kept is None:
            return bnp.mean(loss)
        return bnp.sum(loss) / bnp.sum(kept.astype(loss.dtype))
    if reduction == "sum":
        return bnp.sum(loss)
    return loss


def _check_labels(labels: Any, n: int, ignore_index: int | None) -> None:
    """Raise for out-of-range concrete labels (traced ones are handled in the loss)."""
    from blu.core.interpreter import Tracer

    if isinstance(labels, Tracer):
        return
    v = np.asarray(labels)
    bad = (v < 0) | (v >= n)
    if ignore_index is not None:
        bad &= v != ignore_index
    if bad.any():
        pos = tuple(int(i) for i in np.argwhere(bad)[0])
        raise BluValueError(
            with_user_line(
                f"nn.cross_entropy: label {int(v[pos])} at position {pos} is out of range for "
                f"{n} classes (labels must be in [0, {n})); {int(bad.sum())} such label(s). "
                "Pass ignore_index=<label> for positions to leave out (e.g. padding)"
            )
        )
