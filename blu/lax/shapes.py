"""Shape primitives: broadcast_in_dim, reshape, transpose (and the helpers full / full_like)."""

from __future__ import annotations

__all__ = ['broadcast_in_dim', 'reshape', 'transpose', 'full', 'full_like']  # public lax functions; keep in sync

from typing import Any, Sequence

import numpy as np

from blu.core import dtypes
from blu.core.aval import ShapedArray, canonical_shape
from blu.core.errors import BluShapeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.core.primitive import Primitive
from blu.transforms.ad_util import Zero, deflinear

# ---- broadcast_in_dim --------------------------------------------------------------------------

broadcast_in_dim_p = Primitive("broadcast_in_dim")


@broadcast_in_dim_p.def_impl
def _bid_impl(x: np.ndarray, *, shape, broadcast_dimensions):
    expanded = [1] * len(shape)
    for src, dst in enumerate(broadcast_dimensions):
        expanded[dst] = x.shape[src]
    return np.broadcast_to(x.reshape(expanded), shape)


@broadcast_in_dim_p.def_abstract_eval
def _bid_abstract_eval(x: ShapedArray, *, shape, broadcast_dimensions):
    ok = len(broadcast_dimensions) == x.ndim and all(
        0 <= d < len(shape) for d in broadcast_dimensions
    )
    ok = ok and list(broadcast_dimensions) == sorted(set(broadcast_dimensions))
    ok = ok and all(
        x.shape[i] in (1, shape[d]) for i, d in enumerate(broadcast_dimensions)
    )
    if not ok:
        raise BluShapeError(
            with_user_line(
                f"broadcast_in_dim: cannot broadcast {x.str_short()} to shape {tuple(shape)} "
                f"with broadcast_dimensions={tuple(broadcast_dimensions)}"
            )
        )
    return ShapedArray(shape, x.dtype, x.weak_type)


def _bid_transpose(ct, x, *, shape, broadcast_dimensions):
    in_shape = x.aval.shape
    # sum over the new axes and over axes broadcast from size 1, then reshape back
    sum_axes = tuple(i for i in range(len(shape)) if i not in broadcast_dimensions)
    keep_axes = tuple(
        d for i, d in enumerate(broadcast_dimensions) if in_shape[i] == 1 and shape[d] != 1
    )
    from blu.lax.reductions import reduce_sum

    out = reduce_sum(ct, tuple(sorted(sum_axes + keep_axes)))
    return [reshape(out, in_shape)]


deflinear(broadcast_in_dim_p, _bid_transpose)


@broadcast_in_dim_p.def_batch
def _bid_batch(axis_size, args, dims, *, shape, broadcast_dimensions):
    from blu.transforms.batching import moveaxis

    (x,), (d,) = args, dims
    x = moveaxis(x, d, 0)
    new_shape = (axis_size,) + tuple(shape)
    new_dims = (0,) + tuple(b + 1 for b in broadcast_dimensions)
    return broadcast_in_dim(x, new_shape, new_dims), 0


def broadcast_in_dim(x: Any, shape: Sequence[int], broadcast_dimensions: Sequence[int]) -> Any:
    """Broadcast ``x`` to ``shape``; axis ``i`` of x becomes axis ``broadcast_dimensions[i]``.

    Each x dimension must be 1 or equal to the target dimension.
    """
    shape = canonical_shape(shape)
    aval = get_aval(x)
    dims = tuple(int(d) for d in broadcast_dimensions)
    if aval.shape == shape and dims == tuple(range(len(shape))):
        return x
    return broadcast_in_dim_p.bind(x, shape=shape, broadcast_dimensions=dims)


def broadcast_to_rank_right(x: Any, shape: Sequence[int]) -> Any:
    """numpy-style broadcast of ``x`` to ``shape`` (trailing axes aligned)."""
    aval = get_aval(x)
    nd = len(shape)
    return broadcast_in_dim(x, shape, tuple(range(nd - aval.ndim, nd)))


# ---- reshape -----------------------------------------------------------------------------------

reshape_p = Primitive("reshape")
reshape_p.def_impl(lambda x, *, new_sizes: np.reshape(x, new_sizes))


@reshape_p.def_abstract_eval
def _reshape_abstract_eval(x: ShapedArray, *, new_sizes):
    if int(np.prod(new_sizes, dtype=np.int64)) != x.size:
        raise BluShapeError(
            with_user_line(f"reshape: cannot reshape {x.str_short()} to shape {tuple(new_sizes)}")
        )
    return ShapedArray(new_sizes, x.dtype, x.weak_type)


deflinear(reshape_p, lambda ct, x, *, new_sizes: [reshape(ct, x.aval.shape)])


@reshape_p.def_batch
def _reshape_batch(axis_size, args, dims, *, new_sizes):
    from blu.transforms.batching import moveaxis

    (x,), (d,) = args, dims
    return reshape(moveaxis(x, d, 0), (axis_size,) + tuple(new_sizes)), 0


def reshape(x: Any, new_sizes: Sequence[int]) -> Any:
    """Row-major reshape to ``new_sizes`` (no -1 here; blu.numpy.reshape resolves it)."""
    new_sizes = canonical_shape(new_sizes)
    if get_aval(x).shape == new_sizes:
        return x
    return reshape_p.bind(x, new_sizes=new_sizes)


# ---- transpose ---------------------------------------------------------------------------------

transpose_p = Primitive("transpose")
transpose_p.def_impl(lambda x, *, permutation: np.transpose(x, permutation))


@transpose_p.def_abstract_eval
def _transpose_abstract_eval(x: ShapedArray, *, permutation):
    if sorted(permutation) != list(range(x.ndim)):
        raise BluValueError(
            with_user_line(
                f"transpose: permutation {tuple(permutation)} is not a permutation of the axes "
                f"of {x.str_short()}"
            )
        )
    return ShapedArray(tuple(x.shape[p] for p in permutation), x.dtype, x.weak_type)


def _transpose_transpose(ct, x, *, permutation):
    inv = tuple(int(i) for i in np.argsort(permutation))
    return [transpose(ct, inv)]


deflinear(transpose_p, _transpose_transpose)


@transpose_p.def_batch
def _transpose_batch(axis_size, args, dims, *, permutation):
    (x,), (d,) = args, dims
    from blu.transforms.batching import moveaxis

    x = moveaxis(x, d, 0)
    return transpose(x, (0,) + tuple(p + 1 for p in permutation)), 0


def transpose(x: Any, permutation: Sequence[int]) -> Any:
    """Permute the axes of ``x``: output axis i is input axis ``permutation[i]``."""
    perm = tuple(int(p) for p in permutation)
    if perm == tuple(range(len(perm))):
        return x
    return transpose_p.bind(x, permutation=perm)


# ---- constants ---------------------------------------------------------------------------------


def full(shape: Sequence[int], fill_value: Any, dtype: Any = None) -> Any:
    """An array of ``shape`` filled with ``fill_value`` (a scalar or 0-d array).

    A Python scalar without ``dtype`` gives a weakly typed array of the default dtype.
    """
    shape = canonical_shape(shape)
    if isinstance(fill_value, (bool, int, float)) or isinstance(fill_value, np.generic):
        if dtype is None:
            d, weak = dtypes.dtype_and_weak(fill_value)
        else:
            d, weak = dtypes.canonicalize(dtype), False
        scalar = np.asarray(fill_value, d)[()]
        if weak:
            from blu.lax.elementwise import convert_element_type

            scalar = convert_element_type(scalar, d, weak_type=True)
        return broadcast_in_dim(_as_array(scalar), shape, ())
    aval = get_aval(fill_value)
    if aval.ndim != 0:
        raise BluShapeError(with_user_line(f"full: fill_value must be a scalar, got {aval.str_short()}"))
    if dtype is not None:
        from blu.lax.elementwise import convert_element_type

        fill_value = convert_element_type(fill_value, dtype)
    return broadcast_in_dim(fill_value, shape, ())


def _as_array(x: Any) -> Any:
    """A concrete blu Array from a numpy scalar (so broadcast_in_dim of () still yields an array
    outside of any trace)."""
    if isinstance(x, np.generic):
        from blu.core.array import Array

        return Array(np.asarray(x))
    return x


def full_like(x: Any, fill_value: Any, dtype: Any = None) -> Any:
    """An array with ``x``'s shape (and dtype unless given), filled with ``fill_value``."""
    aval = get_aval(x)
    return full(aval.shape, fill_value, aval.dtype if dtype is None else dtype)


def zeros_like_zero(z: Zero) -> Any:
    return full(z.aval.shape, 0, z.aval.dtype)
