"""Reduction primitives over a set of axes: sums, products, extrema, logical and/or, arg-extrema.

Every reduction keeps the dtype and drops the reduced ``axes`` (sorted, non-negative). Over a
size-0 axis a reduction gives its identity, like numpy's ``initial``: sum 0, prod 1, max ``-inf``
for floats / the dtype's minimum for integers / False for bool, min the opposite, and True / False
for and / or. (Unlike numpy, which raises for max/min of an empty axis without ``initial``.)
``argmax``/``argmin`` of a size-0 axis raise, as in numpy.

The cumulative reductions (cumsum, cumprod, cummax, cummin, cumlogsumexp) live in
``blu/lax/cumulative.py`` and are re-exported from here.
"""

from __future__ import annotations

__all__ = [
    "reduce_sum",
    "reduce_max",
    "reduce_min",
    "reduce_prod",
    "reduce_and",
    "reduce_or",
    "reduce_xor",
    "argmax",
    "argmin",
    "cumsum",
    "cumprod",
    "cummax",
    "cummin",
    "cumlogsumexp",
]  # public lax functions; keep in sync

from collections.abc import Sequence
from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core.aval import ShapedArray
from blu.core.errors import BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.core.primitive import Primitive
from blu.lax._base import check_dtype, compute_in_f32, is_int_or_bool, is_numeric
from blu.lax.bits import xor
from blu.lax.casts import convert_element_type
from blu.lax.cumulative import (  # (cum*: re-exported)
    cumlogsumexp,
    cummax,
    cummin,
    cumprod,
    cumsum,
    dual_mul,
)
from blu.lax.elementwise import div, eq, mul, select
from blu.lax.shapes import broadcast_in_dim, concatenate, full, full_like, reshape, transpose
from blu.lax.slicing import slice as slice_
from blu.lax.slicing import slice_in_dim
from blu.transforms.ad_util import Zero, deflinear, nondifferentiable, tangent_aval


def _check_axes(name: str, x: ShapedArray, axes: tuple[int, ...]) -> None:
    if len(set(axes)) != len(axes) or any(not 0 <= a < x.ndim for a in axes):
        raise BluValueError(
            with_user_line(f"{name}: axes {axes} are not distinct axes of {x.str_short()}")
        )


def reduced_aval(name: str, allowed=None, kind: str = ""):
    """Abstract eval of a reduction: drop ``axes``; dtype kept (``allowed`` checks it)."""

    def rule(x: ShapedArray, *, axes: tuple[int, ...], **_: Any) -> ShapedArray:
        _check_axes(name, x, axes)
        if allowed is not None:
            check_dtype(name, x, allowed, kind)
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


def _unreduce(y: Any, x_shape: tuple[int, ...], axes: tuple[int, ...]) -> Any:
    """Broadcast a reduction's result ``y`` back to the operand's shape."""
    kept = tuple(i for i in range(len(x_shape)) if i not in axes)
    return broadcast_in_dim(y, x_shape, kept)


# ---- reduce_sum --------------------------------------------------------------------------------

reduce_sum_p = Primitive("reduce_sum")


@reduce_sum_p.def_impl
@compute_in_f32
def _reduce_sum_impl(x: np.ndarray, *, axes):
    return np.sum(x, axis=axes, dtype=x.dtype if x.dtype != np.bool_ else np.bool_)


reduce_sum_p.def_abstract_eval(reduced_aval("reduce_sum"))


def _reduce_sum_transpose(ct, x, *, axes):
    if isinstance(ct, Zero):
        return [None]
    return [_unreduce(ct, x.aval.shape, axes)]


deflinear(reduce_sum_p, _reduce_sum_transpose)
batch_reduction(reduce_sum_p)


# ---- reduce_max / reduce_min -------------------------------------------------------------------


def _identity(dtype: np.dtype, kind: str) -> Any:
    """The identity of max (``kind='max'``) or min: the result over a size-0 axis."""
    if dtype == dtypes.bool_:
        return kind == "min"
    if dtypes.is_float(dtype):
        return -np.inf if kind == "max" else np.inf
    if dtypes.is_complex(dtype):  # numpy orders complex numbers lexicographically
        return complex(-np.inf, -np.inf) if kind == "max" else complex(np.inf, np.inf)
    info = np.iinfo(dtype)
    return info.min if kind == "max" else info.max


def _chooser_impl(np_fn, kind: str):
    @compute_in_f32
    def impl(x: np.ndarray, *, axes):
        with np.errstate(invalid="ignore"):  # NaN propagates silently, like XLA
            return np_fn(x, axis=axes, initial=_identity(x.dtype, kind))

    return impl


def _chooser_jvp(prim: Primitive):
    """JVP of max/min (after JAX's ``_reduce_chooser_jvp_rule``): the tangent at the location of
    the extremum; with ties it is the mean of the tangents at every location that attains it.
    Where the extremum is NaN or the axis is empty, the tangent is 0."""

    def rule(primals, tangents, *, axes):
        (x,), (t,) = primals, tangents
        out = prim.bind(x, axes=axes)
        if isinstance(t, Zero) or not dtypes.is_inexact(get_aval(x).dtype):
            return out, Zero(tangent_aval(get_aval(out)))
        shape = get_aval(x).shape
        at_extremum = convert_element_type(eq(x, _unreduce(out, shape, axes)), get_aval(t).dtype)
        counts = reduce_sum_p.bind(at_extremum, axes=axes)
        counts = select(eq(counts, 0), _ones_like(counts), counts)  # no location: tangent 0
        return out, div(reduce_sum_p.bind(mul(t, at_extremum), axes=axes), counts)

    prim.def_jvp(rule)


reduce_max_p = Primitive("reduce_max")
reduce_max_p.def_impl(_chooser_impl(np.max, "max"))
reduce_max_p.def_abstract_eval(reduced_aval("reduce_max"))
_chooser_jvp(reduce_max_p)
batch_reduction(reduce_max_p)

reduce_min_p = Primitive("reduce_min")
reduce_min_p.def_impl(_chooser_impl(np.min, "min"))
reduce_min_p.def_abstract_eval(reduced_aval("reduce_min"))
_chooser_jvp(reduce_min_p)
batch_reduction(reduce_min_p)


def _ones_like(x: Any) -> Any:
    return full_like(x, 1)


def _zeros_like(x: Any) -> Any:
    return full_like(x, 0)


# ---- reduce_prod -------------------------------------------------------------------------------

reduce_prod_p = Primitive("reduce_prod")


@reduce_prod_p.def_impl
@compute_in_f32
def _reduce_prod_impl(x: np.ndarray, *, axes):
    with np.errstate(over="ignore", invalid="ignore"):
        return np.prod(x, axis=axes, dtype=x.dtype)


reduce_prod_p.def_abstract_eval(reduced_aval("reduce_prod", is_numeric, "numeric"))
batch_reduction(reduce_prod_p)


def prod_tangent(x: Any, t: Any, axes: tuple[int, ...]) -> Any:
    """The JVP of ``prod(x, axes)``: ``sum_i t_i prod_{j != i} x_j``, as a pairwise (tree)
    product of the dual numbers ``(x_i, t_i)`` over each reduction group.

    Only multiplications and additions, never a division: the expression is the polynomial
    itself, so it is exact at any number of zeros and so are all its derivatives (a
    ``prod / x_i`` rule gives 0/0 at a zero; a zero-counting rule gets second derivatives with
    two zeros wrong). O(n) work in log2(n) steps.
    """
    shape = get_aval(x).shape
    kept = [i for i in range(len(shape)) if i not in axes]
    out_shape = tuple(shape[i] for i in kept)
    n = int(np.prod([shape[a] for a in axes], dtype=np.int64))
    perm = tuple(kept) + tuple(axes)
    cur = [reshape(transpose(v, perm), out_shape + (n,)) for v in (x, t)]
    dt = get_aval(x).dtype
    lead = len(out_shape)
    while n > 1:
        if n % 2:  # pad the group with the dual one (1, 0)
            cur = [
                concatenate([v, full(out_shape + (1,), fill, dt)], lead)
                for v, fill in zip(cur, (1, 0))
            ]
            n += 1
        h = n // 2

        def half(v, lo, _h=h):
            return slice_(v, (0,) * lead + (lo,), out_shape + (lo + _h,))

        cur = list(dual_mul((half(cur[0], 0), half(cur[1], 0)), (half(cur[0], h), half(cur[1], h))))
        n = h
    if n == 0:
        return full(out_shape, 0, dt)
    return reshape(cur[1], out_shape)


@reduce_prod_p.def_jvp
def _reduce_prod_jvp(primals, tangents, *, axes):
    (x,), (t,) = primals, tangents
    out = reduce_prod_p.bind(x, axes=axes)
    if isinstance(t, Zero) or not dtypes.is_inexact(get_aval(x).dtype):
        return out, Zero(tangent_aval(get_aval(out)))
    return out, prod_tangent(x, t, axes)


# ---- reduce_and / reduce_or --------------------------------------------------------------------


def _is_bool(d: np.dtype) -> bool:
    return d == dtypes.bool_


reduce_and_p = Primitive("reduce_and")
reduce_and_p.def_impl(lambda x, *, axes: np.all(x, axis=axes))
reduce_and_p.def_abstract_eval(reduced_aval("reduce_and", _is_bool, "bool"))
nondifferentiable(reduce_and_p)
batch_reduction(reduce_and_p)

reduce_or_p = Primitive("reduce_or")
reduce_or_p.def_impl(lambda x, *, axes: np.any(x, axis=axes))
reduce_or_p.def_abstract_eval(reduced_aval("reduce_or", _is_bool, "bool"))
nondifferentiable(reduce_or_p)
batch_reduction(reduce_or_p)


# ---- argmax / argmin ---------------------------------------------------------------------------


def _arg_impl(np_fn):
    def impl(x: np.ndarray, *, axis: int, index_dtype: np.dtype):
        if x.dtype in (dtypes.bfloat16, dtypes.float16):
            x = x.astype(np.float32)  # exact; numpy's bf16 comparisons mishandle NaN
        return np_fn(x, axis=axis).astype(index_dtype)

    return impl


def _arg_abstract_eval(name: str):
    def rule(x: ShapedArray, *, axis: int, index_dtype: np.dtype) -> ShapedArray:
        if not 0 <= axis < x.ndim:
            raise BluValueError(
                with_user_line(f"{name}: axis {axis} out of range for {x.str_short()}")
            )
        if x.shape[axis] == 0:
            raise BluValueError(
                with_user_line(f"{name}: axis {axis} of {x.str_short()} is empty (size 0)")
            )
        if not dtypes.is_int(index_dtype):
            raise BluValueError(
                with_user_line(f"{name}: index_dtype must be an integer dtype, got {index_dtype}")
            )
        return ShapedArray(x.shape[:axis] + x.shape[axis + 1 :], index_dtype)

    return rule


def _arg_batch(prim: Primitive):
    def rule(axis_size, args, dims, *, axis, index_dtype):
        (x,), (d,) = args, dims
        new_axis = axis + (axis >= d)
        return prim.bind(x, axis=new_axis, index_dtype=index_dtype), d - (axis < d)

    prim.def_batch(rule)


argmax_p = Primitive("argmax")
argmax_p.def_impl(_arg_impl(np.argmax))
argmax_p.def_abstract_eval(_arg_abstract_eval("argmax"))
nondifferentiable(argmax_p)
_arg_batch(argmax_p)

argmin_p = Primitive("argmin")
argmin_p.def_impl(_arg_impl(np.argmin))
argmin_p.def_abstract_eval(_arg_abstract_eval("argmin"))
nondifferentiable(argmin_p)
_arg_batch(argmin_p)


# ---- the lax functions users call --------------------------------------------------------------


def _axes(x: Any, axes: Sequence[int] | int | None) -> tuple[int, ...]:
    """Sorted non-negative axes (negative ones count from the end); None means all axes.

    Raises:
        BluValueError: an axis is out of range.
    """
    nd = get_aval(x).ndim
    if axes is None:
        return tuple(range(nd))
    if isinstance(axes, (int, np.integer)):
        axes = (axes,)
    out = []
    for a in axes:
        a = int(a)
        if not -nd <= a < nd:
            raise BluValueError(
                with_user_line(f"axis {a} out of range for {get_aval(x).str_short()}")
            )
        out.append(a % nd)
    return tuple(sorted(out))


def reduce_sum(x: Any, axes: Sequence[int] | int | None = None) -> Any:
    """Sum of ``x`` over ``axes`` (all axes by default); the dtype is kept."""
    axes = _axes(x, axes)
    if not axes:
        return x
    return reduce_sum_p.bind(x, axes=axes)


def reduce_max(x: Any, axes: Sequence[int] | int | None = None) -> Any:
    """Maximum of ``x`` over ``axes`` (all by default); the dtype is kept.

    NaN propagates. Over a size-0 axis the result is ``-inf`` (floats), the dtype's minimum
    (integers) or False (bool). The derivative goes to the location of the maximum; with ties it
    is split evenly among them (as in JAX).

    Args:
        x: array of any dtype, shape ``S``.
        axes: axes to reduce (negative ones count from the end).

    Returns:
        Array of shape ``S`` without ``axes``.

    Raises:
        BluValueError: an axis is out of range or repeated.
    """
    axes = _axes(x, axes)
    return reduce_max_p.bind(x, axes=axes) if axes else x


def reduce_min(x: Any, axes: Sequence[int] | int | None = None) -> Any:
    """Minimum of ``x`` over ``axes``; see ``reduce_max`` (size-0 axes give ``+inf``, the
    dtype's maximum, or True)."""
    axes = _axes(x, axes)
    return reduce_min_p.bind(x, axes=axes) if axes else x


def reduce_prod(x: Any, axes: Sequence[int] | int | None = None) -> Any:
    """Product of ``x`` over ``axes`` (1 over a size-0 axis); numeric dtypes, dtype kept.

    The derivative is exact when the input has zeros: each element's partial derivative is the
    product of the other elements, computed as a tree of dual-number products without dividing
    (see ``prod_tangent``), so derivatives of every order are exact at any number of zeros.

    Raises:
        BluTypeError: ``x`` is bool (use ``reduce_and``).
    """
    axes = _axes(x, axes)
    if not axes:
        check_dtype("reduce_prod", get_aval(x), is_numeric, "numeric")
        return x
    return reduce_prod_p.bind(x, axes=axes)


def reduce_and(x: Any, axes: Sequence[int] | int | None = None) -> Any:
    """Logical and (numpy ``all``) of a bool array over ``axes`` (True over a size-0 axis).

    Raises:
        BluTypeError: ``x`` is not bool.
    """
    axes = _axes(x, axes)
    if not axes:
        check_dtype("reduce_and", get_aval(x), _is_bool, "bool")
        return x
    return reduce_and_p.bind(x, axes=axes)


def reduce_or(x: Any, axes: Sequence[int] | int | None = None) -> Any:
    """Logical or (numpy ``any``) of a bool array over ``axes`` (False over a size-0 axis).

    Raises:
        BluTypeError: ``x`` is not bool.
    """
    axes = _axes(x, axes)
    if not axes:
        check_dtype("reduce_or", get_aval(x), _is_bool, "bool")
        return x
    return reduce_or_p.bind(x, axes=axes)


def _arg(prim: Primitive, x: Any, axis: int, index_dtype: Any) -> Any:
    aval = get_aval(x)
    if not -aval.ndim <= int(axis) < aval.ndim:
        raise BluValueError(
            with_user_line(f"{prim.name}: axis {axis} out of range for {aval.str_short()}")
        )
    return prim.bind(x, axis=int(axis) % aval.ndim, index_dtype=dtypes.canonicalize(index_dtype))


def reduce_xor(x: Any, axes: Sequence[int] | int | None = None) -> Any:
    """Bitwise exclusive or of an integer or bool array over ``axes`` (all by default; 0 or
    False over a size-0 axis), ``jax.lax.reduce_xor``: for bool, whether an odd number are
    True. Computed as ``ceil(log2(n))`` xors of halves of each axis. Not differentiable.

    Raises:
        BluTypeError: ``x`` is not an integer or bool array.
        BluValueError: an axis is out of range or repeated.
    """
    check_dtype("reduce_xor", get_aval(x), is_int_or_bool, "integer or bool")
    axes = _axes(x, axes)
    if len(set(axes)) != len(axes):
        raise BluValueError(
            with_user_line(f"reduce_xor: repeated axes {list(axes)} for {get_aval(x).str_short()}")
        )
    for axis in reversed(axes):  # from the last: the axes before keep their numbers
        shape = get_aval(x).shape
        n = shape[axis]
        if n == 0:
            x = full(shape[:axis] + (1,) + shape[axis + 1 :], 0, get_aval(x).dtype)
            n = 1
        while n > 1:
            half = n // 2
            folded = xor(
                slice_in_dim(x, 0, half, axis=axis), slice_in_dim(x, half, 2 * half, axis=axis)
            )
            if n % 2:
                folded = concatenate([folded, slice_in_dim(x, 2 * half, n, axis=axis)], axis)
            x, n = folded, half + n % 2
        x = reshape(x, shape[:axis] + shape[axis + 1 :])
    return x


def argmax(x: Any, axis: int, index_dtype: Any = np.int32) -> Any:
    """Index of the maximum of ``x`` along ``axis`` (first occurrence on ties).

    NaN counts as the maximum (the first NaN's index is returned), like ``numpy.argmax``.
    Not differentiable (integer output).

    Args:
        x: array, shape ``S``, any dtype.
        axis: the axis to search (negative counts from the end).
        index_dtype: integer dtype of the result.

    Returns:
        ``index_dtype`` array of shape ``S`` without ``axis``.

    Raises:
        BluValueError: axis out of range or of size 0; ``index_dtype`` not an integer.
    """
    return _arg(argmax_p, x, axis, index_dtype)


def argmin(x: Any, axis: int, index_dtype: Any = np.int32) -> Any:
    """Index of the minimum of ``x`` along ``axis``; see ``argmax`` (NaN also wins, like
    ``numpy.argmin``)."""
    return _arg(argmin_p, x, axis, index_dtype)
