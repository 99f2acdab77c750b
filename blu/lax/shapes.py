"""Shape primitives: broadcast_in_dim, reshape, transpose, squeeze, concatenate, pad, rev, iota,
and the wrappers expand_dims, broadcast, full, full_like.

All of them are linear in their array operands, so each has a transpose rule; every one except
iota (which has no operands) has a batching rule.
"""

from __future__ import annotations

__all__ = [
    "broadcast_in_dim",
    "broadcast",
    "broadcast_to_rank",
    "reshape",
    "transpose",
    "squeeze",
    "expand_dims",
    "concatenate",
    "pad",
    "rev",
    "iota",
    "full",
    "full_like",
]  # public lax functions; keep in sync

from collections.abc import Sequence
from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core.array import Array
from blu.core.aval import ShapedArray, canonical_shape
from blu.core.errors import BluShapeError, BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.core.primitive import Primitive
from blu.lax import _late
from blu.lax.casts import convert_element_type
from blu.transforms.ad_util import Zero, deflinear, is_undefined
from blu.transforms.batching import bdim_to_front, moveaxis

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
    ok = ok and all(x.shape[i] in (1, shape[d]) for i, d in enumerate(broadcast_dimensions))
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
    out = _late.reduce_sum(ct, tuple(sorted(sum_axes + keep_axes)))
    return [reshape(out, in_shape)]


deflinear(broadcast_in_dim_p, _bid_transpose)


@broadcast_in_dim_p.def_batch
def _bid_batch(axis_size, args, dims, *, shape, broadcast_dimensions):
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
    (x,), (d,) = args, dims
    return reshape(moveaxis(x, d, 0), (axis_size,) + tuple(new_sizes)), 0


def reshape(x: Any, new_sizes: Sequence[int], dimensions: Sequence[int] | None = None) -> Any:
    """Row-major reshape to ``new_sizes`` (no -1 here; blu.numpy.reshape resolves it).

    ``dimensions`` (JAX's): a permutation of ``x``'s axes applied first (``transpose``), so the
    elements are read in that axis order."""
    if dimensions is not None:
        x = transpose(x, dimensions)
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

    x = moveaxis(x, d, 0)
    return transpose(x, (0,) + tuple(p + 1 for p in permutation)), 0


def transpose(x: Any, permutation: Sequence[int]) -> Any:
    """Permute the axes of ``x``: output axis i is input axis ``permutation[i]``."""
    perm = tuple(int(p) for p in permutation)
    if perm == tuple(range(get_aval(x).ndim)):  # a wrong-length perm still reaches the check
        return x
    return transpose_p.bind(x, permutation=perm)


def _normalize_dims(name: str, dims: Any, ndim: int) -> tuple[int, ...]:
    """Distinct axes in ``[-ndim, ndim)`` as non-negative ints, in the given order."""
    if isinstance(dims, (int, np.integer)):
        dims = (dims,)
    out = tuple(int(d) + ndim if int(d) < 0 else int(d) for d in dims)
    if len(set(out)) != len(out) or any(not 0 <= d < ndim for d in out):
        raise BluValueError(
            with_user_line(f"{name}: dimensions {tuple(dims)} are not distinct axes of rank {ndim}")
        )
    return out


def _shift_axes(axes: Sequence[int], bdim: int) -> tuple[int, ...]:
    """Axes of an unbatched value, renumbered for the batched value with its batch axis at bdim."""
    return tuple(a + (a >= bdim) for a in axes)


# ---- squeeze / expand_dims ---------------------------------------------------------------------

squeeze_p = Primitive("squeeze")
squeeze_p.def_impl(lambda x, *, dimensions: np.squeeze(x, dimensions))


@squeeze_p.def_abstract_eval
def _squeeze_abstract_eval(x: ShapedArray, *, dimensions):
    if any(not 0 <= d < x.ndim for d in dimensions) or any(x.shape[d] != 1 for d in dimensions):
        raise BluShapeError(
            with_user_line(
                f"squeeze: dimensions {tuple(dimensions)} must be axes of size 1 of {x.str_short()}"
            )
        )
    shape = tuple(n for i, n in enumerate(x.shape) if i not in dimensions)
    return ShapedArray(shape, x.dtype, x.weak_type)


deflinear(squeeze_p, lambda ct, x, *, dimensions: [reshape(ct, x.aval.shape)])


@squeeze_p.def_batch
def _squeeze_batch(axis_size, args, dims, *, dimensions):
    (x,), (d,) = args, dims
    out_d = d - sum(a < d for a in dimensions)
    return squeeze_p.bind(x, dimensions=_shift_axes(dimensions, d)), out_d


def squeeze(x: Any, dimensions: Sequence[int] | int) -> Any:
    """Remove the axes ``dimensions`` of ``x``, each of which must have size 1.

    Args:
        x: array of any dtype.
        dimensions: axes to drop (negative axes count from the end).

    Raises:
        BluShapeError: a dimension does not have size 1.
        BluValueError: the dimensions are out of range or repeated.
    """
    aval = get_aval(x)
    dims = tuple(sorted(_normalize_dims("squeeze", dimensions, aval.ndim)))
    if not dims:
        return x
    return squeeze_p.bind(x, dimensions=dims)


def expand_dims(x: Any, dimensions: Sequence[int] | int) -> Any:
    """Insert axes of size 1 so that they sit at ``dimensions`` of the result (a reshape).

    Negative dimensions count from the end of the result, as in ``np.expand_dims``.
    """
    aval = get_aval(x)
    nd = aval.ndim + (1 if isinstance(dimensions, (int, np.integer)) else len(dimensions))
    dims = set(_normalize_dims("expand_dims", dimensions, nd))
    it = iter(aval.shape)
    return reshape(x, tuple(1 if i in dims else next(it) for i in range(nd)))


def broadcast(x: Any, sizes: Sequence[int]) -> Any:
    """Prepend axes of the given ``sizes``: the result has shape ``sizes + x.shape``."""
    sizes = canonical_shape(sizes)
    aval = get_aval(x)
    nd = len(sizes) + aval.ndim
    return broadcast_in_dim(x, sizes + aval.shape, tuple(range(len(sizes), nd)))


def broadcast_to_rank(x: Any, rank: int) -> Any:
    """``x`` with leading axes of size 1 added up to rank ``rank`` (``jax.lax.broadcast_to_rank``;
    as JAX's, an ``x`` of rank ``rank`` or more is returned as it is)."""
    rank = dtypes.static_int(rank, "broadcast_to_rank: rank")
    return broadcast(x, (1,) * (rank - get_aval(x).ndim))


# ---- concatenate -------------------------------------------------------------------------------

concatenate_p = Primitive("concatenate")
concatenate_p.def_impl(lambda *xs, dimension: np.concatenate(xs, axis=dimension))


@concatenate_p.def_abstract_eval
def _concatenate_abstract_eval(*xs: ShapedArray, dimension: int):
    all_shapes = ", ".join(x.str_short() for x in xs)
    if not xs:
        raise BluValueError(with_user_line("concatenate: needs at least one operand"))
    nd = xs[0].ndim
    if not 0 <= dimension < nd:
        raise BluValueError(
            with_user_line(f"concatenate: dimension {dimension} out of range for {all_shapes}")
        )
    if any(x.ndim != nd for x in xs) or any(
        x.shape[:dimension] + x.shape[dimension + 1 :]
        != xs[0].shape[:dimension] + xs[0].shape[dimension + 1 :]
        for x in xs
    ):
        raise BluShapeError(
            with_user_line(
                f"concatenate: operands must have equal shapes except on dimension {dimension}, "
                f"got {all_shapes}"
            )
        )
    if len({x.dtype for x in xs}) > 1:
        raise BluTypeError(
            with_user_line(f"concatenate: operands must have equal dtypes, got {all_shapes}")
        )
    shape = list(xs[0].shape)
    shape[dimension] = sum(x.shape[dimension] for x in xs)
    return ShapedArray(shape, xs[0].dtype, all(x.weak_type for x in xs))


def _concatenate_transpose(ct, *xs, dimension):
    cts, start = [], 0
    for x in xs:
        n = (x.aval if is_undefined(x) else get_aval(x)).shape[dimension]
        cts.append(
            _late.slice_in_dim(ct, start, start + n, axis=dimension) if is_undefined(x) else None
        )
        start += n
    return cts


deflinear(concatenate_p, _concatenate_transpose)


@concatenate_p.def_batch
def _concatenate_batch(axis_size, args, dims, *, dimension):
    xs = [bdim_to_front(x, d, axis_size) for x, d in zip(args, dims)]
    return concatenate_p.bind(*xs, dimension=dimension + 1), 0


def concatenate(operands: Sequence[Any], dimension: int) -> Any:
    """Join arrays along an existing axis.

    Args:
        operands: one or more arrays of one dtype and rank, with equal shapes except on
            ``dimension``.
        dimension: the axis to join on (negative counts from the end).

    Raises:
        BluShapeError: shapes differ off ``dimension`` (the message lists every shape).
        BluTypeError: dtypes differ.
    """
    operands = list(operands)
    if not operands:
        raise BluValueError(with_user_line("concatenate: needs at least one operand"))
    if len(operands) == 1:
        return operands[0]
    nd = get_aval(operands[0]).ndim
    dim = int(dimension) + nd if int(dimension) < 0 else int(dimension)
    return concatenate_p.bind(*operands, dimension=dim)


# ---- pad ---------------------------------------------------------------------------------------

pad_p = Primitive("pad")


@pad_p.def_impl
def _pad_impl(x: np.ndarray, padding_value: np.ndarray, *, padding_config):
    # dilate and pad by the positive parts of low/high, then crop the negative parts
    grown, place, crop = [], [], []
    for n, (lo, hi, interior) in zip(x.shape, padding_config):
        size = max(lo, 0) + max(hi, 0) + n + max(n - 1, 0) * interior
        grown.append(size)
        place.append(slice(max(lo, 0), max(lo, 0) + n + max(n - 1, 0) * interior, interior + 1))
        crop.append(slice(-min(lo, 0), size + min(hi, 0)))
    out = np.full(grown, padding_value, dtype=x.dtype)
    out[tuple(place)] = x
    return out[tuple(crop)]


@pad_p.def_abstract_eval
def _pad_abstract_eval(x: ShapedArray, padding_value: ShapedArray, *, padding_config):
    def fail(why: str):
        raise BluShapeError(
            with_user_line(
                f"pad: {why} (operand {x.str_short()}, padding value "
                f"{padding_value.str_short()}, padding_config {tuple(padding_config)})"
            )
        )

    if padding_value.ndim != 0:
        fail("the padding value must be a scalar")
    if padding_value.dtype != x.dtype:
        raise BluTypeError(
            with_user_line(
                f"pad: padding value {padding_value.str_short()} must have the dtype of the "
                f"operand {x.str_short()}"
            )
        )
    if len(padding_config) != x.ndim:
        fail(f"padding_config needs one (low, high, interior) per axis, got {len(padding_config)}")
    shape = []
    for n, (lo, hi, interior) in zip(x.shape, padding_config):
        if interior < 0:
            fail("interior padding must be >= 0")
        size = lo + hi + n + max(n - 1, 0) * interior
        if size < 0:
            fail("negative padding removes more than the whole axis")
        shape.append(size)
    return ShapedArray(shape, x.dtype, x.weak_type)


def _pad_transpose(ct, x, padding_value, *, padding_config):
    # undo low/high (negating them: crop what was added, add zeros for what was cropped), then
    # take every (interior + 1)-th element
    unpad = tuple((-lo, -hi, 0) for lo, hi, _ in padding_config)
    unpadded = pad(ct, 0, unpad)
    shape = get_aval(unpadded).shape
    ct_x = _late.slice(
        unpadded, (0,) * len(shape), shape, tuple(i + 1 for _, _, i in padding_config)
    )
    ct_pv = None
    if is_undefined(padding_value):
        ct_pv = _late.sub(_late.reduce_sum(ct), _late.reduce_sum(ct_x))
    return [ct_x if is_undefined(x) else None, ct_pv]


deflinear(pad_p, _pad_transpose)


@pad_p.def_batch
def _pad_batch(axis_size, args, dims, *, padding_config):
    (x, pv), (xd, pvd) = args, dims
    if pvd is None:
        config = list(padding_config)
        config.insert(xd, (0, 0, 0))
        return pad_p.bind(x, pv, padding_config=tuple(config)), xd
    # a batched padding value: pad with zeros, then select the padding value where the mask
    # (the padded positions) says so
    x = bdim_to_front(x, xd, axis_size)
    zero = np.zeros((), get_aval(x).dtype)
    out = pad_p.bind(x, zero, padding_config=((0, 0, 0),) + tuple(padding_config))
    out_shape = get_aval(out).shape
    is_x = pad(full(get_aval(x).shape[1:], True), False, padding_config)
    is_x = broadcast_in_dim(is_x, out_shape, tuple(range(1, len(out_shape))))
    return _late.select(is_x, out, broadcast_in_dim(pv, out_shape, (0,))), 0


def pad(x: Any, padding_value: Any, padding_config: Sequence[tuple[int, int, int]]) -> Any:
    """Pad ``x`` with ``padding_value`` (like XLA Pad).

    Args:
        x: array, shape ``(n_0, ..., n_{r-1})``.
        padding_value: scalar of x's dtype (a Python scalar adapts to it).
        padding_config: one ``(low, high, interior)`` per axis: ``interior`` (>= 0) values are
            inserted between neighbouring elements, then ``low``/``high`` values before/after;
            a negative ``low``/``high`` removes elements from that end instead.

    Returns:
        array of shape ``low + high + n + max(n - 1, 0) * interior`` per axis.

    Raises:
        BluShapeError: wrong config length, negative interior, or a negative result size.
        BluTypeError: the padding value's dtype differs from x's.
    """
    config = tuple((int(lo), int(hi), int(i)) for lo, hi, i in padding_config)
    if isinstance(padding_value, (bool, int, float, complex)):
        padding_value = np.asarray(padding_value, get_aval(x).dtype)[()]
    return pad_p.bind(x, padding_value, padding_config=config)


# ---- rev ---------------------------------------------------------------------------------------

rev_p = Primitive("rev")
rev_p.def_impl(lambda x, *, dimensions: np.flip(x, dimensions))


@rev_p.def_abstract_eval
def _rev_abstract_eval(x: ShapedArray, *, dimensions):
    if len(set(dimensions)) != len(dimensions) or any(not 0 <= d < x.ndim for d in dimensions):
        raise BluValueError(
            with_user_line(
                f"rev: dimensions {tuple(dimensions)} are not distinct axes of {x.str_short()}"
            )
        )
    return x


deflinear(rev_p, lambda ct, x, *, dimensions: [rev(ct, dimensions)])


@rev_p.def_batch
def _rev_batch(axis_size, args, dims, *, dimensions):
    (x,), (d,) = args, dims
    return rev_p.bind(x, dimensions=_shift_axes(dimensions, d)), d


def rev(x: Any, dimensions: Sequence[int] | int) -> Any:
    """Reverse the order of elements along ``dimensions`` (``np.flip``)."""
    dims = tuple(sorted(_normalize_dims("rev", dimensions, get_aval(x).ndim)))
    if not dims:
        return x
    return rev_p.bind(x, dimensions=dims)


# ---- iota --------------------------------------------------------------------------------------

iota_p = Primitive("iota")


@iota_p.def_impl
def _iota_impl(*, dtype, shape, dimension):
    line = np.arange(shape[dimension]).astype(dtype)
    expanded = [1] * len(shape)
    expanded[dimension] = shape[dimension]
    return np.broadcast_to(line.reshape(expanded), shape)


@iota_p.def_abstract_eval
def _iota_abstract_eval(*, dtype, shape, dimension):
    if not 0 <= dimension < len(shape):
        raise BluValueError(
            with_user_line(f"iota: dimension {dimension} out of range for shape {shape}")
        )
    if dtype == dtypes.bool_:
        raise BluTypeError(with_user_line("iota: dtype must be numeric, got bool"))
    return ShapedArray(shape, dtype)


def iota(dtype: Any, shape: Sequence[int] | int, dimension: int = 0) -> Any:
    """Counting numbers 0, 1, ... along ``dimension``, broadcast to ``shape``.

    ``iota(i32, 3)`` is ``[0, 1, 2]``; ``iota(i32, (2, 3), 1)`` is ``[[0, 1, 2], [0, 1, 2]]``.
    """
    shape = canonical_shape(shape)
    dim = int(dimension) + len(shape) if int(dimension) < 0 else int(dimension)
    return iota_p.bind(dtype=dtypes.canonicalize(dtype), shape=shape, dimension=dim)


# ---- constants ---------------------------------------------------------------------------------


def full(shape: Sequence[int], fill_value: Any, dtype: Any = None) -> Any:
    """An array of ``shape`` filled with ``fill_value`` (a scalar or 0-d array).

    A Python scalar without ``dtype`` gives a weakly typed array of the default dtype.
    """
    shape = canonical_shape(shape)
    if isinstance(fill_value, (bool, int, float, complex)) or isinstance(fill_value, np.generic):
        if dtype is None:
            d, weak = dtypes.dtype_and_weak(fill_value)
        else:
            d, weak = dtypes.canonicalize(dtype), False
        scalar = np.asarray(fill_value, d)[()]
        if weak:
            scalar = convert_element_type(scalar, d, weak_type=True)
        return broadcast_in_dim(_as_array(scalar), shape, ())
    aval = get_aval(fill_value)
    if aval.ndim != 0:
        raise BluShapeError(
            with_user_line(f"full: fill_value must be a scalar, got {aval.str_short()}")
        )
    if dtype is not None:
        fill_value = convert_element_type(fill_value, dtype)
    return broadcast_in_dim(fill_value, shape, ())


def _as_array(x: Any) -> Any:
    """A concrete blu Array from a numpy scalar (so broadcast_in_dim of () still yields an array
    outside of any trace)."""
    if isinstance(x, np.generic):
        return Array(np.asarray(x))
    return x


def full_like(x: Any, fill_value: Any, dtype: Any = None, shape: Any = None) -> Any:
    """An array with ``x``'s shape and dtype unless given (``dtype``, ``shape``: JAX's),
    filled with ``fill_value``."""
    aval = get_aval(x)
    return full(
        aval.shape if shape is None else shape, fill_value, aval.dtype if dtype is None else dtype
    )


def zeros_like_zero(z: Zero) -> Any:
    return full(z.aval.shape, 0, z.aval.dtype)
