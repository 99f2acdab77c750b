"""The methods of blu.numpy's ufuncs (``reduce``, ``accumulate``, ``at``, ``reduceat``), which
``ufunc_api``'s ``ufunc`` checks the arguments of and calls.

The generic ones serve any binary ufunc, as JAX's ``ufunc_api`` does: ``reduce`` and
``accumulate`` a ``lax.scan`` folding ``carry = f(carry, x[i])`` in numpy's order (left to
right, from ``x[0]`` or ``initial``) in numpy's loop dtype, ``at`` and ``reduceat`` a
``fori_loop``. The standard ufuncs' fast paths are tree reductions over the axes at once:
``add.reduce`` is ``sum``, ``multiply.accumulate`` ``cumprod``, ``maximum.at``
``x.at[i].max``, the bitwise reductions ``blu.lax.reduce``'s monoids, the logical ones
``reduce_and``/``reduce_or``/``reduce_xor`` of truth values, ``logaddexp.reduce`` and
``logaddexp2.reduce`` a logsumexp shifted by the maximum (JAX's ``_logsumexp``).

Each ``reduce`` takes ``(u, a, axes, dtype, keepdims, initial, where)``: the ufunc, the array,
the canonical axes, and numpy's arguments.
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
from blu.numpy import logic, transcendental, ufuncs
from blu.numpy._promote import asarray_operand, broadcast_shapes, broadcast_to
from blu.numpy.logic import to_bool
from blu.numpy.manipulation import concatenate, moveaxis, reshape, transpose
from blu.numpy.selection import take


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


# ---- the generic methods (any binary ufunc) ----------------------------------------------------


_COMPARISONS = (logic.equal, logic.not_equal, logic.less, logic.less_equal, logic.greater,
                logic.greater_equal)  # fmt: skip


def _fold_dtype(u, method: str, a: Any, dtype: Any) -> np.dtype:
    """The dtype ``u`` folds ``a`` in (numpy's loop): ``dtype``, else ``u``'s result on two
    elements of ``a`` (``divide.reduce`` of ints folds floats).

    Raises:
        BluTypeError: where numpy has no loop: ``u`` of two ``dtype`` values is not of ``dtype``
            (``arctan2.reduce(ints, dtype=int32)``), or a standard comparison folding non-bool
            values (``equal.reduce`` of ints: its bool results are no ints to compare on).
    """
    aval = get_aval(a)
    name = f"{u.__name__}.{method}"
    if dtype is None:
        dt = u._out_dtype(aval.dtype, aval.dtype)
        if aval.dtype != dtypes.bool_ and u._func in _COMPARISONS:
            raise BluTypeError(
                with_user_line(
                    f"{name}: the comparison folds its bool results, so it needs bool values, "
                    f"got {aval.str_short()} (numpy has no such loop; pass dtype=bool to fold "
                    "the truth values)"
                )
            )
        return dt
    dt = dtypes.canonicalize(dtype)
    if (out := u._out_dtype(dt, dt)) != dt:
        raise BluTypeError(
            with_user_line(
                f"{name}: dtype={dt} cannot carry the fold: {u.__name__} of two {dt} values "
                f"gives {out} (numpy has no such loop)"
            )
        )
    return dt


def _reduce_via_scan(u, a, axes, dtype, keepdims, initial, where):
    aval = get_aval(a)
    dt = _fold_dtype(u, "reduce", a, dtype)
    x = _cast(_to_front(a, axes), dt)
    w = None if where is None else _to_front(broadcast_to(where, aval.shape), axes)
    start = initial if initial is not None else u.identity
    if start is None or (initial is None and where is None and x.shape[0] > 0):
        carry, rest, w = x[0], x[1:], None  # numpy's fold from the first element
    else:
        carry = broadcast_to(_cast(asarray_operand(start), dt), x.shape[1:])
        rest = x
    if get_aval(rest).shape[0] > 0:

        def step(c, xs):
            new = _cast(u(c, xs[0]), dt)
            return (new if w is None else lax.select(xs[1], new, c)), None

        carry, _ = lax.scan(step, carry, (rest, rest if w is None else w))
    if keepdims:
        carry = reshape(carry, tuple(1 if d in axes else s for d, s in enumerate(aval.shape)))
    return carry


def _accumulate_via_scan(u, a, axis, dtype):
    dt = _fold_dtype(u, "accumulate", a, dtype)
    x = _cast(moveaxis(a, axis, 0), dt)
    if get_aval(x).shape[0] <= 1:
        return moveaxis(x, 0, axis)

    def step(c, row):
        c = _cast(u(c, row), dt)
        return c, c

    _, ys = lax.scan(step, x[0], x[1:])
    return moveaxis(concatenate([x[:1], ys]), 0, axis)


def _is_array_index(e: Any) -> bool:
    return not (isinstance(e, slice) or e is None or e is Ellipsis)


def _at_via_loop(u, a, indices, *bs):
    dt = u._out_dtype(get_aval(a).dtype, *(get_aval(asarray_operand(b)).dtype for b in bs))
    a = _cast(a, dt)
    bs = tuple(_cast(asarray_operand(b), dt) for b in bs)
    idx = indices if isinstance(indices, tuple) else (indices,)
    idx = tuple(asarray_operand(e) if _is_array_index(e) else e for e in idx)
    is_array = [_is_array_index(e) for e in idx]
    shape = broadcast_shapes(*(get_aval(e).shape for e, arr in zip(idx, is_array) if arr))
    if not shape:  # one place (a slice may cover many elements, each once)
        return a.at[idx].set(u(a.at[idx].get(), *bs))
    m = math.prod(shape)
    if m == 0:
        return a
    flat = [reshape(broadcast_to(e, shape), (m,)) if arr else e for e, arr in zip(idx, is_array)]
    if bs:  # b broadcasts against a[indices] (numpy's), whose index axes go first here
        sel = get_aval(a.at[idx].get()).shape
        at = [i for i, arr in enumerate(is_array) if arr]
        lead = 0  # numpy keeps adjacent index arrays' axes where they stand
        if at == list(range(at[0], at[-1] + 1)):
            spans = get_aval(a).ndim - sum(e is not None and e is not Ellipsis for e in idx)
            lead = sum(spans if e is Ellipsis else 1 for e in idx[: at[0]])
        k = len(shape)
        order = (*range(lead, lead + k), *range(lead), *range(lead + k, len(sel)))
        b = transpose(broadcast_to(bs[0], sel), order)
        bs = (reshape(b, (m, *get_aval(b).shape[k:])),)

    def body(i, acc):
        here = tuple(e[i] if arr else e for e, arr in zip(flat, is_array))
        return acc.at[here].set(u(acc.at[here].get(), *(b[i] for b in bs)))

    return lax.fori_loop(0, m, body, a)


def _reduceat_via_loop(u, a, idx, axis, dtype):
    dt = _fold_dtype(u, "reduceat", a, dtype)
    a = moveaxis(_cast(a, dt), axis, 0)
    n = get_aval(a).shape[0]
    out = take(a, idx, axis=0)
    k = get_aval(idx).shape[0]
    if k == 0:  # no slices: a 0-length axis (numpy's and JAX's)
        return moveaxis(out, 0, axis)
    start = reshape(idx, (k,) + (1,) * (get_aval(a).ndim - 1))
    end = reshape(concatenate([idx[1:], asarray_operand(np.array([n], idx.dtype))]), start.shape)

    def body(i, acc):
        inside = logic.logical_and(logic.greater(i, start), logic.less(i, end))
        return ufuncs._where(inside, _cast(u(acc, a[i]), dt), acc)

    return moveaxis(lax.fori_loop(0, n, body, out), 0, axis)


# ---- the standard ufuncs' fast paths ------------------------------------------------------


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
