"""The standard ufuncs' methods where blu has a better way than numpy's left-to-right fold (the
generic ``scan`` of ``ufunc_api``), each a tree reduction over the axes at once: ``add.reduce``
is ``sum``, ``multiply.accumulate`` ``cumprod``, ``maximum.at`` ``x.at[i].max``, the bitwise
reductions ``blu.lax.reduce``'s monoids, the logical ones ``reduce_and``/``reduce_or``/
``reduce_xor`` of truth values, ``logaddexp.reduce`` and ``logaddexp2.reduce`` a logsumexp
shifted by the maximum (JAX's ``_logsumexp``).

Each ``reduce`` takes ``(u, a, axes, dtype, keepdims, initial, where)``: the ufunc, the array,
the canonical axes, and numpy's arguments, checked by ``ufunc.reduce``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from blu import lax
from blu.core import dtypes
from blu.core.errors import BluTypeError, with_user_line
from blu.core.interpreter import get_aval
from blu.numpy import transcendental, ufuncs
from blu.numpy._promote import asarray_operand, broadcast_to
from blu.numpy.logic import to_bool
from blu.numpy.manipulation import reshape, transpose


def _cast(x: Any, dtype: Any) -> Any:
    return x if get_aval(x).dtype == dtype else lax.convert_element_type(x, dtype)


def _to_front(a: Any, axes: tuple[int, ...]) -> Any:
    """``a`` with ``axes`` moved to the front and flattened into one (C order)."""
    shape = get_aval(a).shape
    kept = tuple(d for d in range(len(shape)) if d not in axes)
    n = math.prod(shape[d] for d in axes)
    return reshape(transpose(a, axes + kept), (n, *(shape[d] for d in kept)))


def _keep(out: Any, shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool) -> Any:
    """``out`` reduced from ``shape`` over ``axes``, with the axes kept as 1s if ``keepdims``."""
    if not keepdims:
        return out
    return reshape(out, tuple(1 if d in axes else s for d, s in enumerate(shape)))


def _reduce_with(fn: Callable[..., Any], has_dtype: bool) -> Callable[..., Any]:
    """``reduce`` as a reduction of blu.numpy (``sum``, ``prod``, ``max``...)."""

    def impl(u, a, axes, dtype, keepdims, initial, where):
        if dtype is not None and not has_dtype:
            a = _cast(a, np.dtype(dtype))
        kw = {"dtype": dtype} if has_dtype else {}
        return fn(a, axis=axes, keepdims=keepdims, initial=initial, where=where, **kw)

    return impl


def _reduce_monoid(u, a, axes, dtype, keepdims, initial, where):
    """``reduce`` of an associative, commutative ufunc with an identity: ``blu.lax.reduce``
    (the bitwise ones become ``reduce_and``/``reduce_or``/``reduce_xor``)."""
    dt = np.dtype(dtype) if dtype is not None else u._out_dtype(a.dtype, a.dtype)
    a = _cast(a, dt)
    ident = np.asarray(u.identity).astype(dt)
    if where is not None:
        a = ufuncs._where(where, a, ident)
    out = lax.reduce(a, ident[()], u._func, axes)
    if initial is not None:
        out = _cast(u(out, initial), dt)
    return _keep(out, a.shape, axes, keepdims)


def _reduce_logical(reduce: Callable[..., Any]) -> Callable[..., Any]:
    """``logical_and/or/xor.reduce``: the truth values of ``a`` (and of ``initial``) reduced in
    bool, then given ``dtype`` (JAX's: ``dtype=int32`` gives 0s and 1s; a float dtype is a
    BluTypeError, as numpy and JAX refuse it)."""

    def impl(u, a, axes, dtype, keepdims, initial, where):
        dt = None if dtype is None else dtypes.canonicalize(dtype)
        if dt is not None and dt != dtypes.bool_ and not dtypes.is_int(dt):
            raise BluTypeError(
                with_user_line(
                    f"{u.__name__}.reduce: dtype must be bool or an integer (to hold the truth "
                    f"values), got {dt} for {get_aval(a).str_short()}"
                )
            )
        b = to_bool(a)
        if where is not None:
            b = ufuncs._where(where, b, bool(u.identity))
        out = reduce(b, axes)
        if initial is not None:
            out = u(out, to_bool(initial))
        out = _keep(out, get_aval(a).shape, axes, keepdims)
        return out if dt is None else _cast(out, dt)

    return impl


def _reduce_logaddexp(base2: bool) -> Callable[..., Any]:
    """``logaddexp.reduce`` (``logaddexp2.reduce`` with ``base2``): ``m + log(sum(exp(a - m)))``
    with ``m`` the maximum (0 where it is not finite), a tree reduction where numpy folds left to
    right. Only ``-inf`` (or nothing) gives ``-inf`` with gradient 0 (``logaddexp``'s
    convention), a ``+inf`` gives ``+inf``, a NaN NaN; the gradient is the softmax of ``a``.
    float16 and bfloat16 are computed in float32."""
    exp, log = (transcendental.exp2, transcendental.log2) if base2 else (lax.exp, lax.log)

    def impl(u, a, axes, dtype, keepdims, initial, where):
        aval = get_aval(a)
        dt = (
            dtypes.canonicalize(dtype)
            if dtype is not None
            else u._out_dtype(aval.dtype, aval.dtype)
        )
        if not dtypes.is_float(dt):
            raise BluTypeError(
                with_user_line(
                    f"{u.__name__}.reduce: dtype={dt} cannot carry the fold: it needs a real "
                    f"floating dtype, for {aval.str_short()} (numpy has no such loop)"
                )
            )
        x = _cast(a, dtypes.float32 if dt.itemsize < 4 else dt)
        if where is not None:
            x = ufuncs._where(broadcast_to(where, aval.shape), x, -np.inf)
        m = lax.reduce_max(x, axes)
        m = lax.stop_gradient(ufuncs._where(ufuncs.isfinite(m), m, 0))
        s = lax.reduce_sum(exp(ufuncs.subtract(x, _keep(m, aval.shape, axes, True))), axes)
        empty = lax.eq(s, lax.full_like(s, 0))  # only -inf: log(1) keeps the gradient 0
        out = ufuncs.add(log(ufuncs._where(empty, 1, s)), m)
        out = _cast(ufuncs._where(empty, -np.inf, out), dt)
        if initial is not None:
            out = _cast(u(out, asarray_operand(initial)), dt)
        return _keep(out, aval.shape, axes, keepdims)

    return impl


def _accumulate_with(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``accumulate`` as ``cumsum``/``cumprod``, integers kept in their dtype (numpy's and JAX's
    ``add.accumulate``; bools count in the default int)."""

    def impl(u, a, axis, dtype):
        dt = get_aval(a).dtype
        if dtype is None and np.issubdtype(dt, np.integer):
            dtype = dt
        return fn(a, axis=axis, dtype=dtype)

    return impl


def _at_with(method: str) -> Callable[..., Any]:
    return lambda u, a, indices, b: getattr(a.at[indices], method)(b)
