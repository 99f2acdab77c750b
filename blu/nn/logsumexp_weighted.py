"""``logsumexp`` with weights, signs and a mask: JAX's ``b=``, ``return_sign=`` and ``where=``.

``log(|sum(b * exp(a))|)`` over the axes, shifted by the max of the entries whose weight is
nonzero (``jax.scipy.special.logsumexp``'s algorithm); :func:`blu.nn.logsumexp` calls this only
when one of the three is given, so its plain form traces as before.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import blu.numpy as bnp
from blu import lax
from blu.core import dtypes
from blu.core.errors import BluTypeError, with_user_line


def weighted_logsumexp(
    x: Any, axes: tuple[int, ...], keepdims: bool, b: Any, return_sign: bool, where: Any
) -> Any:
    """``logsumexp`` of float ``x`` (axes already checked) with weights ``b`` broadcast to x's
    shape, and entries where ``where`` is False left out. Returns ``out``, or ``(out, sign)``
    with ``return_sign``; without it a negative sum gives NaN (as in JAX)."""
    if b is not None:
        b = bnp.asarray(b)
        if dtypes.is_complex(b.dtype):
            raise BluTypeError(
                with_user_line(f"nn.logsumexp: complex b ({b.dtype}) is not supported")
            )
        dt = bnp.result_type(x, b)
        dt = dt if dtypes.is_float(dt) else dtypes.float32
        x, b = x.astype(dt), bnp.broadcast_to(b.astype(dt), x.shape)
    out_dtype = x.dtype
    low = x.dtype in (dtypes.bfloat16, dtypes.float16)
    a = x.astype(dtypes.float32) if low else x
    if b is not None:
        b = b.astype(a.dtype)
        a = bnp.where(bnp.not_equal(b, 0), a, -np.inf)
    if where is not None:
        a = bnp.where(bnp.broadcast_to(bnp.asarray(where, bool), a.shape), a, -np.inf)
    if any(a.shape[i] == 0 for i in axes):
        m = bnp.zeros(tuple(1 if i in axes else d for i, d in enumerate(a.shape)), a.dtype)
    else:
        m = bnp.max(a, axis=axes, keepdims=True)
        m = lax.stop_gradient(bnp.where(bnp.isfinite(m), m, bnp.zeros_like(m)))
    e = bnp.exp(a - m)
    if b is not None:
        e = e * b
    s = bnp.sum(e, axis=axes, keepdims=True)
    sign = bnp.sign(s)
    out = bnp.log(bnp.abs(s)) + m
    if not keepdims:
        keep = tuple(d for i, d in enumerate(a.shape) if i not in axes)
        out, sign = bnp.reshape(out, keep), bnp.reshape(sign, keep)
    if return_sign:
        return out.astype(out_dtype), sign.astype(out_dtype)
    return bnp.where(bnp.less(sign, 0), np.nan, out).astype(out_dtype)
