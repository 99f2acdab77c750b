"""Finite differences of sampled functions: ``gradient`` (central differences) and ``unwrap``
(phase unwrapping), NumPy's with ``jax.numpy``'s restrictions (``gradient``: uniform scalar
spacings, ``edge_order`` 1)."""

from __future__ import annotations

import math
from typing import Any

from blu.core import dtypes
from blu.core.errors import BluShapeError, BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.numpy._promote import asarray_operand, canonicalize_axis, promote_dtypes, to_inexact
from blu.numpy.manipulation import concatenate
from blu.numpy.reductions import cumsum
from blu.numpy.selection import where
from blu.numpy.standard import diff
from blu.numpy.ufuncs import abs as _abs
from blu.numpy.ufuncs import mod

__all__ = ["gradient", "unwrap"]


def _along(a: Any, start: Any, stop: Any, axis: int) -> Any:
    idx = [slice(None)] * get_aval(a).ndim
    idx[axis] = slice(start, stop)
    return a[tuple(idx)]


def gradient(f: Any, *varargs: Any, axis: Any = None, edge_order: Any = None) -> Any:
    """The gradient of samples ``f`` by second-order central differences inside and one-sided
    differences at the edges (``jax.numpy.gradient``): one array per axis in ``axis`` (all by
    default; a single array for a single axis). ``varargs`` are the sample spacings: none
    (1), one for every axis, or one per axis, each a scalar.

    Raises:
        BluShapeError: an axis with fewer than 2 samples. BluTypeError: a number of spacings
        other than 0, 1 or one per axis. BluValueError: an array spacing (non-uniform
        coordinates) or an ``edge_order`` (neither is in JAX).
    """
    if edge_order is not None:
        raise BluValueError(with_user_line("gradient: edge_order is not supported (as JAX)"))
    a, *spacing = (to_inexact(x) for x in promote_dtypes(asarray_operand(f), *varargs))
    shape = get_aval(a).shape
    if axis is None:
        axes = tuple(range(len(shape)))
    else:
        axes = tuple(
            canonicalize_axis(i, len(shape))
            for i in (axis if isinstance(axis, (tuple, list)) else (axis,))
        )
    if not axes:
        return []
    if min(shape[i] for i in axes) < 2:
        raise BluShapeError(
            with_user_line(
                f"gradient: each axis needs at least 2 samples, got shape {shape} along axes {axes}"
            )
        )
    if not spacing:
        dx = [1.0] * len(axes)
    elif len(spacing) == 1:
        dx = spacing * len(axes)
    elif len(spacing) == len(axes):
        dx = spacing
    else:
        raise BluTypeError(
            with_user_line(f"gradient: expected 0, 1 or {len(axes)} spacings, got {len(spacing)}")
        )
    for h in dx:
        if get_aval(asarray_operand(h)).ndim != 0:
            raise BluValueError(
                with_user_line(
                    "gradient: spacings must be scalars (non-uniform spacing is not in JAX)"
                )
            )
    out = []
    for ax, h in zip(axes, dx):
        g = concatenate(
            [
                _along(a, 1, 2, ax) - _along(a, 0, 1, ax),
                (_along(a, 2, None, ax) - _along(a, None, -2, ax)) * 0.5,
                _along(a, -1, None, ax) - _along(a, -2, -1, ax),
            ],
            axis=ax,
        )
        out.append(g / h)
    return out[0] if len(axes) == 1 else out


def unwrap(p: Any, discont: Any = None, axis: int = -1, period: Any = 2 * math.pi) -> Any:
    """``p`` with each jump of more than ``max(discont, period / 2)`` along ``axis`` replaced
    by its complement modulo ``period`` (``numpy.unwrap``), in the promoted dtype of ``p`` and
    ``period``: integer ``p`` with an integer ``period`` stays integer (half a period rounded
    down, as numpy's and JAX's), the default float ``period`` makes it float.
    """
    p, period = promote_dtypes(asarray_operand(p), period)
    if get_aval(p).ndim == 0:
        raise BluShapeError(with_user_line("unwrap: p must have at least one dimension"))
    axis = canonicalize_axis(axis, get_aval(p).ndim)
    if discont is None:
        discont = period / 2
    interval = period // 2 if dtypes.is_int(get_aval(p).dtype) else period / 2
    dd = diff(p, axis=axis)
    ddmod = mod(dd + interval, period) - interval
    ddmod = where((ddmod == -interval) & (dd > 0), interval, ddmod)
    correct = where(_abs(dd) < discont, 0, ddmod - dd)
    if get_aval(p).shape[axis] == 0:
        return p
    return concatenate(
        [_along(p, 0, 1, axis), _along(p, 1, None, axis) + cumsum(correct, axis=axis)], axis=axis
    ).astype(get_aval(p).dtype)  # (cumsum widens int8/int16 and bool)
