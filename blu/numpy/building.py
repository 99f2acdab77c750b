"""Arrays built from pieces and functions (``block``, ``fromfunction``, ``mask_indices``) and
numpy's type queries ``isscalar`` and ``iterable``, with JAX's semantics."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from blu import lax
from blu.core import dtypes
from blu.core.array import Array
from blu.core.errors import BluShapeError, BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import Tracer, get_aval
from blu.numpy._promote import asarray_operand, promote_dtypes
from blu.numpy.creation import arange, ones
from blu.numpy.selection import nonzero
from blu.transforms.batching import vmap

__all__ = ["block", "fromfunction", "mask_indices", "isscalar", "iterable"]


def block(arrays: Any) -> Any:
    """Assemble an array from nested lists of blocks (numpy's and JAX's ``block``).

    The innermost lists are concatenated along the last axis, the next ones along the second to
    last, and so on; every block is first given leading size-1 axes up to the result's rank
    (``max(list depth, largest block rank)``). Dtypes promote as ``concatenate``'s.

    Args:
        arrays: an array (returned as an array) or nested lists of arrays and scalars, every
            leaf at the same list depth.

    Raises:
        BluTypeError: a tuple anywhere (numpy and JAX refuse them).
        BluValueError: an empty list, or leaves at different list depths.
        BluShapeError: blocks whose sizes do not line up.
    """
    leaves: list[Any] = []

    def depth_of(xs: Any, where: str) -> int:
        if isinstance(xs, tuple):
            raise BluTypeError(
                with_user_line(f"block: {where} is a tuple; only lists nest blocks ({xs!r:.60})")
            )
        if isinstance(xs, list):
            if not xs:
                raise BluValueError(with_user_line(f"block: {where} is an empty list"))
            depths = [depth_of(x, f"{where}[{i}]") for i, x in enumerate(xs)]
            if any(d != depths[0] for d in depths):
                raise BluValueError(
                    with_user_line(
                        f"block: list depths differ inside {where} ({depths}); every block must "
                        "be nested equally deep"
                    )
                )
            return depths[0] + 1
        leaves.append(asarray_operand(xs))
        return 0

    depth = depth_of(arrays, "arrays")
    if depth == 0:
        return leaves[0]
    leaves = list(promote_dtypes(*leaves))
    rank = max([depth] + [get_aval(x).ndim for x in leaves])
    it = iter(leaves)

    def build(xs: Any, level: int) -> Any:
        if not isinstance(xs, list):
            x = next(it)
            return lax.broadcast_to_rank(x, rank) if get_aval(x).ndim < rank else x
        parts = [build(x, level - 1) for x in xs]
        axis = rank - level
        shapes = [get_aval(p).shape for p in parts]
        for s in shapes[1:]:
            if s[:axis] + s[axis + 1 :] != shapes[0][:axis] + shapes[0][axis + 1 :]:
                raise BluShapeError(
                    with_user_line(
                        f"block: blocks of shapes {shapes} do not line up for concatenation "
                        f"along axis {axis - rank}"
                    )
                )
        return lax.concatenate(parts, axis) if len(parts) > 1 else parts[0]

    return build(arrays, depth)


def fromfunction(function: Callable, shape: Any, *, dtype: Any = float, **kwargs: Any) -> Any:
    """``function`` applied to the coordinates of every element of ``shape`` (numpy's and JAX's
    ``fromfunction``).

    As in JAX, ``function`` is ``vmap``-ed over one ``arange(n, dtype=dtype)`` per axis, so it
    is called with scalar coordinates and may return any pytree of arrays (each gets ``shape``
    in front); for an elementwise ``function`` this is numpy's result. ``kwargs`` are passed to
    ``function`` unbatched.

    Args:
        function: called as ``function(i_0, ..., i_{n-1}, **kwargs)``.
        shape: the grid's shape (a sequence of non-negative ints).
        dtype: the coordinates' dtype (default: the default float, float32, as in JAX).

    Raises:
        BluTypeError: a shape that is not a sequence of ints. BluValueError: a negative
        dimension.
    """
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)):
        raise BluTypeError(
            with_user_line(f"fromfunction: shape must be a sequence of ints, got {shape!r}")
        )
    shape = tuple(dtypes.static_int(s, "fromfunction: shape") for s in shape)
    if any(s < 0 for s in shape):
        raise BluValueError(with_user_line(f"fromfunction: negative dimension in shape {shape}"))
    fn = functools.partial(function, **kwargs) if kwargs else function
    n = len(shape)
    for i in range(n):  # the last coordinate innermost: the first axis is mapped outermost
        in_axes = tuple(0 if j == n - 1 - i else None for j in range(n))
        fn = vmap(fn, in_axes=in_axes)
    return fn(*(arange(s, dtype=dtype) for s in shape))


def mask_indices(n: int, mask_func: Callable, k: Any = 0, *, size: int | None = None) -> Any:
    """The ``(rows, columns)`` where ``mask_func(ones((n, n)), k)`` is nonzero, row-major
    (numpy's and JAX's ``mask_indices``; e.g. ``mask_indices(n, triu, 1)`` is the strict upper
    triangle).

    Args:
        n: the side of the square mask.
        mask_func: called as ``mask_func(a, k)`` on an ``(n, n)`` array of ones, returning an
            array of that shape (``triu``, ``tril``...).
        k: passed to ``mask_func``.
        size: as ``nonzero``'s: the static number of indices (needed under ``jit`` where the
            mask is traced), padded with zeros or truncated.

    Returns:
        two int32 arrays.

    Raises:
        BluShapeError: ``mask_func`` returned another shape.
    """
    n = dtypes.static_int(n, "mask_indices: n")
    mask = mask_func(ones((n, n)), k)
    got = get_aval(asarray_operand(mask)).shape
    if got != (n, n):
        raise BluShapeError(
            with_user_line(f"mask_indices: mask_func returned shape {got}, not {(n, n)}")
        )
    i, j = nonzero(mask, size=size)
    return i, j


def isscalar(element: Any) -> bool:
    """Whether ``element`` is a scalar: what ``np.isscalar`` accepts (Python and numpy scalars,
    strings), and, as in JAX (unlike numpy), any 0-d array, blu's and tracers included."""
    if np.isscalar(element):
        return True
    if isinstance(element, (np.ndarray, Array, Tracer)):
        return get_aval(element).ndim == 0
    return False


def iterable(y: Any) -> bool:
    """Whether ``iter(y)`` works (numpy's and JAX's ``iterable``): False for 0-d arrays."""
    return bool(np.iterable(y))
