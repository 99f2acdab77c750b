"""``scatter_apply`` (JAX's ``jax.lax.scatter_apply``): ``func`` applied to the operand's
elements at the indexed coordinates, once per occurrence of a coordinate, composed of the
gather/scatter primitives and a loop; no primitive of its own.

blu's scatters take ``axes=`` and ``indices`` of shape ``batch_shape + (len(axes),)`` (see
``blu.lax.gather_scatter``), not ``ScatterDimensionNumbers``; each index row covers the operand's
dimensions not in ``axes`` whole. XLA's scatter applies the update computation once per update
element, so a coordinate named ``k`` times gets ``func`` applied ``k`` times (JAX's docstring:
"duplicate indices resulting in multiple applications of ``func``"). blu gathers the indexed
rows, counts each coordinate's occurrences (a ``scatter_add`` of ones), applies ``func`` to the
rows ``max count`` times, each row only while the step is below its coordinate's count, and
scatters the rows back (duplicate rows hold the same value, so which one is written does not
matter, and ``scatter``'s transpose sends the cotangent through the one kept).

The loop has a static length (a ``scan``, so reverse mode works) when the count is known at
trace time: ``unique_indices=True`` (one application; JAX leaves overlapping indices undefined
then) or concrete indices (counted on the host). For traced indices it is a ``while_loop`` up
to the largest count, which ``jit``, ``vmap`` and forward mode take but reverse mode does not
(JAX's ``scatter_apply`` has no derivatives at all).
"""

from __future__ import annotations

__all__ = ["scatter_apply"]

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core.errors import BluShapeError, BluTypeError, with_user_line
from blu.core.interpreter import Tracer, get_aval
from blu.lax import elementwise as ew
from blu.lax.control_flow import fori_loop
from blu.lax.gather_scatter import _mode, _prepare, gather, scatter, scatter_add
from blu.lax.reductions import reduce_max
from blu.lax.shapes import full, reshape
from blu.transforms.batching import vmap


def _host_max_count(indices: np.ndarray, dims: Sequence[int], mode: str) -> int:
    """The largest number of rows naming one in-bounds (or, under 'clip', clamped) coordinate."""
    rows = indices.reshape(math.prod(indices.shape[:-1]), len(dims)).astype(np.int64)
    if rows.shape[0] == 0:
        return 0
    hi = np.asarray(dims, np.int64) - 1
    if mode == "clip":
        rows = np.clip(rows, 0, hi)
    else:
        rows = rows[np.all((rows >= 0) & (rows <= hi), axis=1)]
        if rows.shape[0] == 0:
            return 0
    _, counts = np.unique(rows, axis=0, return_counts=True)
    return int(counts.max())


def scatter_apply(
    operand: Any,
    indices: Any,
    func: Callable[[Any], Any],
    *,
    axes: Sequence[int],
    update_shape: Sequence[int] = (),
    indices_are_sorted: bool = False,
    unique_indices: bool = False,
    mode: str | None = None,
) -> Any:
    """``operand`` with ``func`` applied to its elements at ``indices`` (JAX's, in blu's index
    form), once per occurrence: a coordinate named twice gets ``func(func(x))``.

    Example: ``scatter_apply(x, np.array([[1], [3], [1]]), lambda v: v * 2, axes=(0,))``
    multiplies ``x[1]`` by 4 and ``x[3]`` by 2.

    Args:
        operand: array of any dtype.
        indices: integer array of shape ``batch_shape + (len(axes),)``; each row names one
            coordinate on ``axes``, covering the other dimensions whole.
        func: a function of one scalar of the operand's dtype returning one of the same dtype
            (JAX traces it on a scalar; blu applies it with ``vmap`` to the indexed elements).
            It may close over traced values: derivatives flow into them.
        axes: distinct operand axes.
        update_shape: JAX's shape of the updates; ``()`` (its default) or
            ``batch_shape + rest_shape`` (the shape blu's index form gives them).
        indices_are_sorted: accepted for JAX's signature (no effect).
        unique_indices: the caller promises no coordinate repeats: ``func`` is applied once
            (to a repeated coordinate too; JAX leaves that undefined), with a loop-free program.
        mode: ``'drop'`` (default, and ``None``: rows with an out-of-bounds coordinate are
            skipped, as JAX's fill-or-drop), ``'fill'`` (the same), ``'clip'`` or
            ``'promise_in_bounds'`` (JAX's: the caller promises in-bounds rows; others dropped).

    Returns:
        an array of the operand's shape and dtype.

    Raises:
        BluTypeError: ``func`` is not callable or does not map a scalar of the operand's dtype to
            one; non-integer indices. BluShapeError: ``update_shape`` is neither ``()`` nor the
            updates' shape; indices whose last dimension is not ``len(axes)``.
        BluValueError: repeated or out-of-range axes, an unknown mode.
    """
    del indices_are_sorted
    if not callable(func):
        raise BluTypeError(with_user_line(f"scatter_apply: func {func!r} is not callable"))
    indices, axes = _prepare("scatter_apply", operand, indices, axes)
    mode = _mode("drop" if mode in (None, "promise_in_bounds") else mode)
    op = get_aval(operand)
    v = gather(operand, indices, axes=axes, mode="clip")  # (checks indices as scatter's)
    rows_shape = get_aval(v).shape
    if tuple(update_shape) not in ((), rows_shape):
        raise BluShapeError(
            with_user_line(
                f"scatter_apply: update_shape {tuple(update_shape)} is neither () nor the "
                f"updates' shape {rows_shape} (batch_shape + the operand's dimensions not in "
                f"axes {axes}) for indices of shape {get_aval(indices).shape}"
            )
        )
    dims = [op.shape[a] for a in axes]
    n = math.prod(rows_shape)
    if n == 0:
        return operand

    def apply(v: Any) -> Any:
        mapped = vmap(func)(reshape(v, (n,)))
        got = get_aval(mapped)
        if got.shape != (n,):
            raise BluTypeError(
                with_user_line(
                    f"scatter_apply: func maps a {op.dtype} scalar to an array of shape "
                    f"{got.shape[1:]}; it must return a scalar of the operand's dtype"
                )
            )
        out = reshape(mapped, rows_shape)
        if got.dtype != op.dtype:
            raise BluTypeError(
                with_user_line(
                    f"scatter_apply: func maps a {op.dtype} scalar to a {got.dtype} one; it must "
                    f"keep the operand's dtype {op.dtype}"
                )
            )
        return out

    if unique_indices:
        return scatter(operand, indices, apply(v), axes=axes, mode=mode)
    zeros = full(op.shape, 0, dtypes.int32)
    ones = full(rows_shape, 1, dtypes.int32)
    counts = gather(scatter_add(zeros, indices, ones, axes=axes, mode=mode), indices, axes=axes)

    def step(k: Any, v: Any) -> Any:
        return ew.select(ew.lt(full(rows_shape, k, dtypes.int32), counts), apply(v), v)

    if isinstance(indices, Tracer):
        top = reduce_max(counts, axes=tuple(range(len(rows_shape))))
    else:  # (counted on the host: a static length, so the loop is a scan)
        top = _host_max_count(np.asarray(indices), dims, mode)
    if not isinstance(top, Tracer) and int(top) == 1:
        v = apply(v)  # (no coordinate repeats: one application, no loop)
    else:
        v = fori_loop(0, top, step, v)
    return scatter(operand, indices, v, axes=axes, mode=mode)
