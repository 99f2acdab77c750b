"""Repetition along axes: ``tile`` (whole arrays), ``repeat`` (each element, by static,
concrete or, with ``total_repeat_length``, traced counts) and ``resize`` (the raveled array,
cyclically, to a new shape)."""

from __future__ import annotations

import builtins
import math
import operator
from typing import Any

import numpy as np

from blu import lax
from blu.core import dtypes
from blu.core.errors import BluShapeError, BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import Tracer
from blu.numpy._promote import asarray_operand, canonicalize_axis, concrete_value
from blu.numpy.manipulation import _aval, moveaxis, ravel

__all__ = ["tile", "repeat", "resize"]


def tile(A: Any, reps: Any) -> Any:
    """Repeat the whole array ``reps`` times along each axis (numpy's rank rules)."""
    A = asarray_operand(A)
    reps = (int(reps),) if isinstance(reps, (int, np.integer)) else tuple(int(r) for r in reps)
    s = _aval(A).shape
    nd = builtins.max(len(s), len(reps))
    s = (1,) * (nd - len(s)) + s
    reps = (1,) * (nd - len(reps)) + reps
    A = lax.reshape(A, s)
    inter = tuple(v for r, d in zip(reps, s) for v in (r, d))
    b = lax.broadcast_in_dim(A, inter, tuple(range(1, 2 * nd, 2)))
    return lax.reshape(b, tuple(r * d for r, d in zip(reps, s)))


def repeat(
    a: Any, repeats: Any, axis: int | None = None, *, total_repeat_length: int | None = None
):
    """Repeat each element ``repeats`` times along ``axis`` (the raveled array when None).

    ``repeats`` is a static int, or a concrete array of one count per element (raveled, as
    JAX does, so any shape of that size; size 1 counts for all); with ``total_repeat_length``
    (a static int, JAX's argument) it may be traced, and the result has that length along
    ``axis``: cut short where the counts sum to more, padded with the axis's last element
    where they sum to less.

    Raises:
        ConcretizationError: ``repeats`` is traced and ``total_repeat_length`` is None.
        BluShapeError: ``repeats`` holds neither 1 count nor one per element of ``axis``.
        BluValueError: negative counts (concrete), a negative ``total_repeat_length``, or a
            length to fill from an empty axis.
    """
    a = asarray_operand(a)
    what = None
    if axis is None:  # the counts' errors name the shape that the user gave
        what = f"the array of shape {_aval(a).shape}, raveled,"
        a, axis = ravel(a), 0
    s = _aval(a).shape
    axis = canonicalize_axis(axis, len(s), "repeat")
    what = what or f"axis {axis} of the array of shape {s}"
    if total_repeat_length is not None:
        return _repeat_to_length(a, repeats, axis, int(total_repeat_length), what)
    reps = concrete_value(repeats, "repeat (the repeat counts)")
    _check_counts(reps.shape, s[axis], what)
    if reps.ndim == 0 or reps.size == 1:
        r = int(reps.reshape(()))
        if r < 0:
            raise BluValueError(with_user_line(f"repeat: negative repeats {r}"))
        inter = s[: axis + 1] + (r,) + s[axis + 1 :]
        b = lax.broadcast_in_dim(a, inter, tuple(i for i in range(len(inter)) if i != axis + 1))
        return lax.reshape(b, s[:axis] + (s[axis] * r,) + s[axis + 1 :])
    if (reps < 0).any():  # (numpy's own ValueError came through)
        raise BluValueError(with_user_line(f"repeat: negative repeats in {reps.tolist()}"))
    if reps.dtype.kind not in "iub":  # (numpy's 'safe' cast; a float count was truncated)
        raise BluTypeError(
            with_user_line(f"repeat: repeats must be integers, got {reps.dtype} {reps.tolist()}")
        )
    # ``take(a, idx, axis)``: one gather of the repeated rows (its index axis first), moved to
    # ``axis``
    idx = np.repeat(np.arange(s[axis]), reps.reshape(-1).astype(np.int64)).astype(np.int32)
    return moveaxis(lax.gather(a, idx[:, None], axes=(axis,), mode="clip"), 0, axis)


def _check_counts(shape: tuple[int, ...], n: int, what: str) -> None:
    """``repeats`` of ``shape`` must hold 1 count or ``n``, one per element of ``what``."""
    size = int(np.prod(shape, dtype=np.int64))
    if size != 1 and size != n:
        raise BluShapeError(
            with_user_line(
                f"repeat: repeats of shape {tuple(shape)} hold {size} counts, but {what} has "
                f"{n} elements (give 1 count or {n})"
            )
        )


def _repeat_to_length(a: Any, repeats: Any, axis: int, total: int, what: str) -> Any:
    """``repeat`` with ``total_repeat_length``: output position ``j`` reads the element whose
    running count first exceeds ``j`` (the last one past the sum). Traced counts: a 1 added at
    each element's first position (``cumsum(reps) - reps``; those past the end dropped), whose
    running sum less 1 is the element each position reads (JAX's construction)."""
    n = _aval(a).shape[axis]
    _check_counts(
        _aval(repeats).shape if isinstance(repeats, Tracer) else np.shape(repeats), n, what
    )
    if total < 0:
        raise BluValueError(with_user_line(f"repeat: total_repeat_length {total} is negative"))
    if n == 0 and total > 0:
        raise BluValueError(
            with_user_line(f"repeat: cannot fill {total} positions from an empty axis {axis}")
        )
    if not isinstance(repeats, Tracer):
        reps = np.broadcast_to(np.asarray(repeats, np.int64).reshape(-1), (n,))
        if (reps < 0).any():
            raise BluValueError(with_user_line(f"repeat: negative repeats {reps.min()}"))
        idx = np.searchsorted(np.cumsum(reps), np.arange(total), side="right")
        idx = np.minimum(idx, builtins.max(n - 1, 0)).astype(np.int32)
    else:
        reps = lax.convert_element_type(repeats, dtypes.int32)
        if _aval(reps).ndim == 0 or _aval(reps).size == 1:
            reps = lax.broadcast_in_dim(lax.reshape(reps, ()), (n,), ())
        elif _aval(reps).shape != (n,):  # one count per element, in another shape: raveled
            reps = lax.reshape(reps, (n,))
        starts = lax.sub(lax.cumsum(reps, 0), reps)
        ones = lax.full((n,), 1, dtypes.int32)
        marks = lax.scatter_add(
            lax.full((total,), 0, dtypes.int32), lax.reshape(starts, (n, 1)), ones, axes=(0,)
        )
        idx = lax.sub(lax.cumsum(marks, 0), lax.full((total,), 1, dtypes.int32))
        idx = lax.min(idx, lax.full((total,), n - 1, dtypes.int32))
    got = lax.gather(a, lax.reshape(idx, (total, 1)), axes=(axis,), mode="clip")
    return moveaxis(got, 0, axis)


def resize(a: Any, new_shape: Any) -> Any:
    """An array of shape ``new_shape`` filled with the raveled ``a`` repeated cyclically
    (``jax.numpy.resize``; numpy's function, not the method): zeros when ``a`` is empty.

    ``new_shape`` (an int or a sequence of ints) is static. Differentiable in ``a``.

    Raises:
        BluValueError: a negative dimension. BluTypeError: a non-integer dimension.
        ConcretizationError: a traced ``new_shape``.
    """
    if isinstance(new_shape, Tracer):
        concrete_value(new_shape, "resize (new_shape)")
    dims = (new_shape,) if np.ndim(new_shape) == 0 else tuple(new_shape)
    try:
        shape = tuple(operator.index(d) for d in dims)
    except TypeError:
        raise BluTypeError(
            with_user_line(f"resize: new_shape must be ints, got {new_shape!r}")
        ) from None
    if builtins.any(d < 0 for d in shape):
        raise BluValueError(
            with_user_line(f"resize: all dimensions of new_shape must be >= 0, got {shape}")
        )
    a = ravel(asarray_operand(a))
    n, total = _aval(a).size, math.prod(shape)
    if n == 0 or total == 0:
        return lax.full(shape, 0, _aval(a).dtype)
    reps = -(-total // n)
    flat = lax.reshape(lax.broadcast_in_dim(a, (reps, n), (1,)), (reps * n,))
    return lax.reshape(lax.slice_in_dim(flat, 0, total), shape)
