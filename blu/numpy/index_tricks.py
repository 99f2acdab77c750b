"""NumPy's index helpers as ``jax.numpy`` has them: ``unravel_index``, ``ravel_multi_index``,
``tril_indices`` / ``triu_indices`` (and ``_from``), ``diag_indices`` (and ``_from``),
``indices``."""

from __future__ import annotations

import builtins
import math
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from blu.core.errors import BluIndexError, BluShapeError, BluValueError, with_user_line
from blu.core.interpreter import Tracer
from blu.numpy._promote import asarray_operand, concrete_value
from blu.numpy.creation import arange, asarray, zeros
from blu.numpy.manipulation import broadcast_arrays, reshape, stack
from blu.numpy.selection import where
from blu.numpy.ufuncs import clip

__all__ = [
    "diag_indices",
    "diag_indices_from",
    "indices",
    "ravel_multi_index",
    "tril_indices",
    "tril_indices_from",
    "triu_indices",
    "triu_indices_from",
    "unravel_index",
]


def unravel_index(indices: Any, shape: Sequence[int]) -> tuple:
    """Flat indices to a tuple of coordinate arrays (C order). Negative indices count from
    the end; concrete out-of-range indices raise, traced ones are clipped (as JAX).

    Raises:
        BluIndexError: a concrete index outside ``[-size, size)``.
    """
    shape = tuple(operator.index(d) for d in shape)
    size = math.prod(shape)
    idx = asarray_operand(indices)
    if not isinstance(idx, Tracer):
        v = np.asarray(concrete_value(idx, "unravel_index"))
        if v.size and (v.min() < -size or v.max() >= size):
            raise BluIndexError(
                with_user_line(f"unravel_index: an index is out of bounds for shape {shape}")
            )
    idx = where(idx < 0, idx + size, idx)
    idx = clip(idx, 0, builtins.max(size - 1, 0))
    out = []
    for stride_dims in range(len(shape)):
        stride = math.prod(shape[stride_dims + 1 :])
        out.append((idx // stride) % shape[stride_dims])
    return tuple(out)


def ravel_multi_index(multi_index: Sequence[Any], dims: Sequence[int], mode: str = "raise",
                      order: str = "C") -> Any:  # fmt: skip
    """Coordinate arrays to flat indices (``mode``: ``"raise"`` (checked when concrete),
    ``"clip"`` or ``"wrap"``; ``order`` ``"C"`` or ``"F"``).

    Raises:
        BluIndexError: ``mode="raise"`` and a concrete coordinate is out of bounds.
        BluValueError: a wrong number of coordinate arrays, or an unknown mode/order.
    """
    dims = tuple(operator.index(d) for d in dims)
    if len(multi_index) != len(dims) or mode not in ("raise", "clip", "wrap") or order not in "CF":
        raise BluValueError(
            with_user_line(
                f"ravel_multi_index: {len(multi_index)} coordinate arrays for dims {dims}, "
                f"mode {mode!r}, order {order!r}"
            )
        )
    coords = [asarray_operand(c) for c in multi_index]
    fixed = []
    for c, d in zip(coords, dims):
        if mode == "raise" and not isinstance(c, Tracer):
            v = np.asarray(concrete_value(c, "ravel_multi_index"))
            if v.size and (v.min() < 0 or v.max() >= d):
                raise BluIndexError(
                    with_user_line(f"ravel_multi_index: a coordinate is out of bounds for {dims}")
                )
        fixed.append(c % d if mode == "wrap" else clip(c, 0, d - 1))
    order_dims = range(len(dims)) if order == "C" else reversed(range(len(dims)))
    out = None
    for i in order_dims:
        out = fixed[i] if out is None else out * dims[i] + fixed[i]
    return out


def tril_indices(n: int, k: int = 0, m: int | None = None) -> tuple:
    """Row and column indices of the lower triangle of an ``(n, m)`` array (int32)."""
    r, c = np.tril_indices(n, k, m)
    return asarray(r.astype(np.int32)), asarray(c.astype(np.int32))


def _shape_2d(arr: Any, name: str) -> tuple[int, ...]:
    """The shape of the 2-d ``arr`` (which may be traced: only its shape is read)."""
    shape = np.shape(arr) if not isinstance(arr, Tracer) else arr.aval.shape
    if len(shape) != 2:
        raise BluShapeError(with_user_line(f"{name}: arr must be 2-d, got shape {tuple(shape)}"))
    return shape


def tril_indices_from(arr: Any, k: int = 0) -> tuple:
    """``tril_indices(*arr.shape, k)``: the lower triangle's indices of the 2-d ``arr``'s shape
    (int32; ``arr`` may be traced, only its shape is read).

    Raises:
        BluShapeError: ``arr`` is not 2-d.
    """
    shape = _shape_2d(arr, "tril_indices_from")
    return tril_indices(shape[0], k, shape[1])


def triu_indices(n: int, k: int = 0, m: int | None = None) -> tuple:
    """Row and column indices of the upper triangle of an ``(n, m)`` array (int32)."""
    r, c = np.triu_indices(n, k, m)
    return asarray(r.astype(np.int32)), asarray(c.astype(np.int32))


def triu_indices_from(arr: Any, k: int = 0) -> tuple:
    """``triu_indices(*arr.shape, k)``, as ``tril_indices_from``.

    Raises:
        BluShapeError: ``arr`` is not 2-d.
    """
    shape = _shape_2d(arr, "triu_indices_from")
    return triu_indices(shape[0], k, shape[1])


def diag_indices(n: int, ndim: int = 2) -> tuple:
    """``ndim`` copies of ``arange(n)`` (int32): the main diagonal of an ``(n,) * ndim`` array."""
    n, ndim = operator.index(n), operator.index(ndim)
    if n < 0 or ndim < 0:
        raise BluValueError(with_user_line(f"diag_indices: n={n} and ndim={ndim} must be >= 0"))
    return (arange(n, dtype=np.int32),) * ndim


def diag_indices_from(arr: Any) -> tuple:
    """``diag_indices(arr.shape[0], arr.ndim)`` (``arr`` may be traced, only its shape is read).

    Raises:
        BluShapeError: ``arr`` has fewer than 2 dimensions or unequal ones.
    """
    shape = np.shape(arr) if not isinstance(arr, Tracer) else arr.aval.shape
    if len(shape) < 2 or len(set(shape)) != 1:
        raise BluShapeError(
            with_user_line(
                f"diag_indices_from: arr must be at least 2-d with equal dimensions, got "
                f"shape {tuple(shape)}"
            )
        )
    return diag_indices(shape[0], len(shape))


def indices(dimensions: Sequence[int], dtype: Any = np.int32, sparse: bool = False) -> Any:
    """An array of coordinate grids, ``(len(dimensions), *dimensions)`` (or a tuple of
    broadcastable arrays with ``sparse=True``)."""
    dims = tuple(operator.index(d) for d in dimensions)
    out = []
    for i, d in enumerate(dims):
        shape = [1] * len(dims)
        shape[i] = d
        g = reshape(arange(d, dtype=dtype), tuple(shape))
        out.append(g if sparse else broadcast_arrays(g, zeros(dims, dtype))[0])
    return tuple(out) if sparse else stack(out) if out else zeros((0,), dtype)
