"""The standard ufuncs' methods where blu has a better way than numpy's left-to-right fold (the
generic ``scan`` of ``ufunc_api``), each a tree reduction over the axes at once: ``add.reduce``
is ``sum``, ``multiply.accumulate`` ``cumprod``, ``maximum.at`` ``x.at[i].max``, the bitwise
reductions ``blu.lax.reduce``'s monoids, ``logical_and.reduce`` ``all``.

Each ``reduce`` takes ``(u, a, axes, dtype, keepdims, initial, where)``: the ufunc, the array,
the canonical axes, and numpy's arguments, checked by ``ufunc.reduce``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from blu import lax
from blu.core.interpreter import get_aval
from blu.numpy import ufuncs
from blu.numpy.manipulation import reshape, transpose
from blu.numpy.reductions import all as _all
from blu.numpy.reductions import any as _any


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
        if fn in (_all, _any):  # no initial=: combine it after
            out = fn(a, axis=axes, keepdims=keepdims, where=where)
            return out if initial is None else u(out, initial)
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
