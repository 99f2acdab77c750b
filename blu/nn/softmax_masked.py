"""``softmax`` and ``log_softmax`` with a mask: JAX's ``where=``.

Entries where the mask is False are left out of the sum and give 0 (softmax) or ``-inf``
(log_softmax), with a zero gradient; :func:`blu.nn.softmax` and :func:`blu.nn.log_softmax`
call this only when ``where`` is given, so their plain forms trace as before.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import blu.numpy as bnp
from blu.nn.operands import _axes, _broadcast_shape, _stable_max, _upcast


def masked_softmax(x: Any, axis: Any, where: Any, log: bool) -> Any:
    """``softmax`` (or, with ``log``, ``log_softmax``) of float ``x`` over ``axis`` with the
    entries where ``where`` is False left out. ``x`` and ``where`` broadcast together, as in
    JAX: a larger mask gives the result its shape, and ``axis`` counts in that shape.

    A group with nothing left in it (all masked, or only ``-inf`` left) gives 0 (``-inf``)
    everywhere and a zero gradient, where JAX's arithmetic gives NaN for its unmasked entries.
    """
    name = "log_softmax" if log else "softmax"
    mask = bnp.asarray(where, bool)
    shape = _broadcast_shape(name, "where", mask.shape, x.shape)
    if shape != x.shape:  # (a mask no larger than x traces as before)
        x = bnp.broadcast_to(x, shape)
    axes = _axes(axis, x.ndim, name)
    keep = bnp.broadcast_to(mask, x.shape)
    if x.size == 0:
        return x
    a = bnp.where(keep, _upcast(x), -np.inf)  # left out: exp(-inf) adds 0, gradient 0
    shifted = a - _stable_max(a, axes)
    e = bnp.exp(shifted)
    s = bnp.sum(e, axis=axes, keepdims=True)
    s = bnp.where(bnp.equal(s, 0), bnp.ones_like(s), s)  # nothing left: 0 / 1, log(1)
    if log:
        out = bnp.where(keep, shifted - bnp.log(s), -np.inf)
    else:
        out = bnp.where(keep, e / s, bnp.zeros_like(e))
    return out.astype(x.dtype)
