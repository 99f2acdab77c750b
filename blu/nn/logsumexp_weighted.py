"""``logsumexp`` with weights, signs and a mask: JAX's ``b=``, ``return_sign=`` and ``where=``.

``log(|sum(b * exp(a))|)`` over the axes, shifted by the max of the entries whose weight is
nonzero (``jax.scipy.special.logsumexp``'s algorithm); :func:`blu.nn.logsumexp` calls this only
when one of the three is given, so its plain form traces as before.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import blu.numpy as bnp
from blu.core import dtypes
from blu.core.errors import BluTypeError, with_user_line
from blu.nn.operands import _axes, _broadcast_shape, _stable_max, _upcast
from blu.numpy._promote import asarray_operand_in, is_python_scalar


def weighted_logsumexp(
    x: Any, axis: Any, keepdims: bool, b: Any, return_sign: bool, where: Any
) -> Any:
    """``logsumexp`` of float ``x`` over ``axis`` (of the broadcast shape) with weights ``b``
    broadcast with ``x`` and entries where ``where`` is False left out (as JAX: a larger ``b``
    or ``where`` broadcasts ``x``). Returns ``out``, or ``(out, sign)`` with ``return_sign``;
    without it a negative sum gives NaN (as in JAX)."""
    if b is not None:
        # a Python float beside float64 is float64's value, not float32's widened
        b = asarray_operand_in(b, bnp.result_type(x, b)) if is_python_scalar(b) else bnp.asarray(b)
        if dtypes.is_complex(b.dtype):
            raise BluTypeError(
                with_user_line(f"nn.logsumexp: complex b ({b.dtype}) is not supported")
            )
        dt = bnp.result_type(x, b)
        dt = dt if dtypes.is_float(dt) else dtypes.float32
        shape = _broadcast_shape("logsumexp", "b", b.shape, x.shape)
        x = x.astype(dt)
        if x.shape != shape:  # (a b no larger than x traces as before)
            x = bnp.broadcast_to(x, shape)
        b = bnp.broadcast_to(b.astype(dt), shape)
    if where is not None:
        against = "x and b" if b is not None else "x"
        shape = _broadcast_shape("logsumexp", "where", np.shape(where), x.shape, against)
        if shape != x.shape:  # (a mask no larger than x traces as before)
            x = bnp.broadcast_to(x, shape)
            b = None if b is None else bnp.broadcast_to(b, shape)
    axes = _axes(axis, x.ndim, "logsumexp")
    out_dtype = x.dtype
    a = _upcast(x)
    keep = None  # the entries that count: left out ones (mask, zero weight) add exactly 0
    if b is not None:
        b = b.astype(a.dtype)
        keep = bnp.not_equal(b, 0)
    if where is not None:
        mask = bnp.broadcast_to(bnp.asarray(where, bool), a.shape)
        keep = mask if keep is None else bnp.logical_and(keep, mask)
    if keep is not None:
        a = bnp.where(keep, a, -np.inf)
    if any(a.shape[i] == 0 for i in axes):
        m = bnp.zeros(tuple(1 if i in axes else d for i, d in enumerate(a.shape)), a.dtype)
    else:
        m = _stable_max(a, axes)
    e = bnp.exp(a - m)
    if b is not None:
        e = e * bnp.where(keep, b, bnp.zeros_like(b))  # (a NaN weight left out is no NaN)
    s = bnp.sum(e, axis=axes, keepdims=True)
    sign = bnp.sign(s)
    # nothing left (all -inf or left out): log(1) in its place keeps the gradient 0, not NaN
    empty = bnp.equal(s, 0)
    out = bnp.where(empty, -np.inf, bnp.log(bnp.abs(bnp.where(empty, bnp.ones_like(s), s))) + m)
    if not keepdims:
        kept = tuple(d for i, d in enumerate(a.shape) if i not in axes)
        out, sign = bnp.reshape(out, kept), bnp.reshape(sign, kept)
    if return_sign:
        return out.astype(out_dtype), sign.astype(out_dtype)
    return bnp.where(bnp.less(sign, 0), np.nan, out).astype(out_dtype)
