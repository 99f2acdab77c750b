"""Reduction primitives over a set of axes: reduce_sum (more follow the same pattern)."""

from __future__ import annotations

__all__ = ['reduce_sum']  # public lax functions; keep in sync

from typing import Any, Sequence

import numpy as np

from blu.core.aval import ShapedArray
from blu.core.errors import BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.core.primitive import Primitive
from blu.lax._base import compute_in_f32
from blu.transforms.ad_util import deflinear


def _check_axes(name: str, x: ShapedArray, axes: tuple[int, ...]) -> None:
    if len(set(axes)) != len(axes) or any(not 0 <= a < x.ndim for a in axes):
        raise BluValueError(
            with_user_line(f"{name}: axes {axes} are not distinct axes of {x.str_short()}")
        )


def reduced_aval(name: str):
    """Abstract eval of a reduction: drop ``axes``; dtype kept."""

    def rule(x: ShapedArray, *, axes: tuple[int, ...], **_: Any) -> ShapedArray:
        _check_axes(name, x, axes)
        shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
        return ShapedArray(shape, x.dtype, x.weak_type)

    return rule


def batch_reduction(prim: Primitive):
    """Batching rule for reductions with an ``axes`` param: shift the axes past the batch dim."""

    def rule(axis_size, args, dims, *, axes, **params):
        (x,), (d,) = args, dims
        new_axes = tuple(a + (a >= d) for a in axes)
        out_d = d - sum(a < d for a in axes)
        return prim.bind(x, axes=new_axes, **params), out_d

    prim.def_batch(rule)


reduce_sum_p = Primitive("reduce_sum")


@reduce_sum_p.def_impl
@compute_in_f32
def _reduce_sum_impl(x: np.ndarray, *, axes):
    return np.sum(x, axis=axes, dtype=x.dtype if x.dtype != np.bool_ else np.bool_)


reduce_sum_p.def_abstract_eval(reduced_aval("reduce_sum"))


def _reduce_sum_transpose(ct, x, *, axes):
    from blu.lax.shapes import broadcast_in_dim

    shape = x.aval.shape
    kept = tuple(i for i in range(len(shape)) if i not in axes)
    return [broadcast_in_dim(ct, shape, kept)]


deflinear(reduce_sum_p, _reduce_sum_transpose)
batch_reduction(reduce_sum_p)


def _axes(x: Any, axes: Sequence[int] | int | None) -> tuple[int, ...]:
    nd = get_aval(x).ndim
    if axes is None:
        return tuple(range(nd))
    if isinstance(axes, int):
        axes = (axes,)
    return tuple(sorted(int(a) % nd if nd else int(a) for a in axes))


def reduce_sum(x: Any, axes: Sequence[int] | int | None = None) -> Any:
    """Sum of ``x`` over ``axes`` (all axes by default); the dtype is kept."""
    axes = _axes(x, axes)
    if not axes:
        return x
    return reduce_sum_p.bind(x, axes=axes)
