"""Sorting: sort (lexicographic, several operands), top_k; and the gather along one axis that
their derivatives use (take_along_axis, with its transpose scatter_add_along_axis).

Float keys sort like numpy: NaNs last (for ``top_k``, which orders from the largest, NaNs first);
``-0.0`` and ``0.0`` compare equal.
"""

from __future__ import annotations

__all__ = ["sort", "sort_key_val", "top_k", "approx_max_k", "approx_min_k"]

from collections.abc import Sequence
from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core.aval import ShapedArray
from blu.core.errors import BluShapeError, BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.core.primitive import Primitive
from blu.lax import elementwise as ew
from blu.lax._base import fmt_avals
from blu.lax.casts import convert_element_type
from blu.lax.gather_scatter import scatter_add_p
from blu.lax.shapes import broadcast_in_dim, concatenate, full, iota, reshape, transpose
from blu.transforms.ad_util import Zero, tangent_aval
from blu.transforms.batching import bdim_to_front, moveaxis


def _index_dtype(n: int) -> np.dtype:
    return dtypes.int32 if n < 2**31 else dtypes.int64


def _sortable(x: np.ndarray) -> np.ndarray:
    """numpy mis-sorts NaN in bfloat16/float16: compare those in float32 (exact)."""
    return x.astype(np.float32) if x.dtype in (dtypes.bfloat16, dtypes.float16) else x


# ---- take_along_axis and its transpose ---------------------------------------------------------


def _flat_along(x: np.ndarray, axis: int) -> np.ndarray:
    """``x`` with ``axis`` moved last and the other axes flattened: shape (rest, x.shape[axis])."""
    x = np.moveaxis(x, axis, -1)
    return x.reshape(int(np.prod(x.shape[:-1])), x.shape[-1])


def _check_along(name: str, x: ShapedArray, idx: ShapedArray, axis: int) -> None:
    if not dtypes.is_int(idx.dtype):
        raise BluTypeError(
            with_user_line(f"{name}: indices must be integers, got {idx.str_short()}")
        )
    ok = x.ndim == idx.ndim and 0 <= axis < x.ndim
    ok = ok and all(a == b for i, (a, b) in enumerate(zip(x.shape, idx.shape)) if i != axis)
    if not ok:
        raise BluShapeError(
            with_user_line(
                f"{name}: operand {x.str_short()} and indices {idx.str_short()} must agree on "
                f"every axis but axis {axis}"
            )
        )


take_along_axis_p = Primitive("take_along_axis")


@take_along_axis_p.def_impl
def _take_along_axis_impl(x: np.ndarray, idx: np.ndarray, *, axis: int) -> np.ndarray:
    return np.take_along_axis(x, idx.astype(np.intp), axis=axis)


@take_along_axis_p.def_abstract_eval
def _take_along_axis_abstract_eval(x: ShapedArray, idx: ShapedArray, *, axis: int):
    _check_along("take_along_axis", x, idx, axis)
    return ShapedArray(idx.shape, x.dtype, x.weak_type)


@take_along_axis_p.def_jvp
def _take_along_axis_jvp(primals, tangents, *, axis):
    (x, idx), (t, _) = primals, tangents
    out = take_along_axis_p.bind(x, idx, axis=axis)
    if isinstance(t, Zero):
        return out, Zero(tangent_aval(get_aval(out)))
    return out, take_along_axis_p.bind(t, idx, axis=axis)


@take_along_axis_p.def_transpose
def _take_along_axis_transpose(ct, x, idx, *, axis):
    if isinstance(ct, Zero):
        return [None, None]
    n = x.aval.shape[axis]
    return [scatter_add_along_axis_p.bind(ct, idx, axis=axis, size=n), None]


def _batch_along(prim: Primitive):
    def rule(axis_size, args, dims, *, axis, **params):
        a, idx = (bdim_to_front(v, d, axis_size) for v, d in zip(args, dims))
        return prim.bind(a, idx, axis=axis + 1, **params), 0

    prim.def_batch(rule)


_batch_along(take_along_axis_p)

# out = zeros with ``size`` along axis; out[..., idx[..., j, ...], ...] += updates[..., j, ...]
scatter_add_along_axis_p = Primitive("scatter_add_along_axis")


@scatter_add_along_axis_p.def_impl
def _scatter_add_impl(u: np.ndarray, idx: np.ndarray, *, axis: int, size: int) -> np.ndarray:
    moved_shape = np.moveaxis(u, axis, -1).shape[:-1] + (size,)
    acc_dtype = np.float32 if u.dtype in (dtypes.bfloat16, dtypes.float16) else u.dtype
    flat_out = np.zeros((int(np.prod(moved_shape[:-1])), size), acc_dtype)
    flat_u, flat_idx = _flat_along(u, axis), _flat_along(idx, axis).astype(np.intp)
    rows = np.arange(flat_u.shape[0])[:, None]
    np.add.at(flat_out, (rows, flat_idx), flat_u.astype(acc_dtype))
    return np.moveaxis(flat_out.reshape(moved_shape), -1, axis).astype(u.dtype)


@scatter_add_along_axis_p.def_abstract_eval
def _scatter_add_abstract_eval(u: ShapedArray, idx: ShapedArray, *, axis: int, size: int):
    _check_along("scatter_add_along_axis", u, idx, axis)
    if u.shape != idx.shape:
        raise BluShapeError(
            with_user_line(
                f"scatter_add_along_axis: updates and indices differ: {fmt_avals((u, idx))}"
            )
        )
    return ShapedArray(u.shape[:axis] + (size,) + u.shape[axis + 1 :], u.dtype, u.weak_type)


@scatter_add_along_axis_p.def_jvp
def _scatter_add_jvp(primals, tangents, *, axis, size):
    (u, idx), (t, _) = primals, tangents
    out = scatter_add_along_axis_p.bind(u, idx, axis=axis, size=size)
    if isinstance(t, Zero):
        return out, Zero(tangent_aval(get_aval(out)))
    return out, scatter_add_along_axis_p.bind(t, idx, axis=axis, size=size)


@scatter_add_along_axis_p.def_transpose
def _scatter_add_transpose(ct, u, idx, *, axis, size):
    if isinstance(ct, Zero):
        return [None, None]
    return [take_along_axis_p.bind(ct, idx, axis=axis), None]


_batch_along(scatter_add_along_axis_p)


def _scatter_add_along_decomposition(u: Any, idx: Any, *, axis: int, size: int) -> Any:
    """``scatter_add_along_axis`` as one ``scatter_add`` (so compiled programs run it as the
    scatter kernel of ``blu/lower/mlir/scatter.py`` on every target, not on the host).

    The operand is viewed as ``(outer, n, inner)`` (the axes before ``axis``, ``axis``, the axes
    after it); each update element is one scatter row with coordinates ``(o, idx, i)`` into
    zeros of shape ``(outer, size, inner)`` (``(o, idx)`` into ``(outer, size)`` when
    ``inner == 1``: the common last-axis case, 8 bytes of coordinates per element, not 12).
    float16/bfloat16 are accumulated in float32 and rounded once, as the impl does; negative
    indices count from the end, as numpy's; indices still out of range are dropped (the impl
    raises). On CUDA targets the additions are float32/float64 atomics (``atom.add``), so their
    order, and a float sum's last bits, is not deterministic.
    """
    shape = get_aval(u).shape
    outer, n, inner = int(np.prod(shape[:axis])), shape[axis], int(np.prod(shape[axis + 1 :]))
    half = get_aval(u).dtype in (dtypes.bfloat16, dtypes.float16)
    acc = convert_element_type(u, dtypes.float32) if half else u
    rows = (outer, n, inner) if inner != 1 else (outer, n)  # one scatter row per update element
    kt = _index_dtype(max(size, 1))
    k = convert_element_type(reshape(idx, rows), kt)
    k = ew.select(ew.lt(k, full(rows, 0, kt)), ew.add(k, full(rows, size, kt)), k)
    coords = [iota(kt, rows, 0), k] + ([iota(kt, rows, 2)] if inner != 1 else [])
    indices = concatenate([reshape(c, rows + (1,)) for c in coords], len(rows))
    zeros = full((outer, size, inner)[: len(rows)], 0, get_aval(acc).dtype)
    out = scatter_add_p.bind(zeros, indices, reshape(acc, rows), axes=(0, 1, 2)[: len(rows)],
                             mode="fill_or_drop")  # fmt: skip
    out = reshape(out, shape[:axis] + (size,) + shape[axis + 1 :])
    return convert_element_type(out, get_aval(u).dtype) if half else out


scatter_add_along_axis_p.decomposition = _scatter_add_along_decomposition


def take_along_axis(x: Any, indices: Any, axis: int) -> Any:
    """``numpy.take_along_axis`` for in-range indices of the same rank (no broadcasting):
    ``out[..., j, ...] = x[..., indices[..., j, ...], ...]`` along ``axis``. Linear in ``x``.
    Used by the derivatives of sort, top_k and cummax."""
    return take_along_axis_p.bind(x, indices, axis=int(axis) % get_aval(x).ndim)


# ---- sort --------------------------------------------------------------------------------------

sort_p = Primitive("sort", multiple_results=True)


@sort_p.def_impl
def _sort_impl(*operands: np.ndarray, dimension: int, is_stable: bool, num_keys: int):
    keys = [_sortable(k) for k in operands[:num_keys]]
    if num_keys == 1:
        perm = np.argsort(keys[0], axis=dimension, kind="stable")
    else:  # np.lexsort sorts by its last key first
        perm = np.lexsort(keys[::-1], axis=dimension)
    return [np.take_along_axis(x, perm, axis=dimension) for x in operands]


@sort_p.def_abstract_eval
def _sort_abstract_eval(*operands: ShapedArray, dimension: int, is_stable: bool, num_keys: int):
    if not operands:
        raise BluValueError(with_user_line("sort: needs at least one operand"))
    if len({o.shape for o in operands}) > 1:
        raise BluShapeError(
            with_user_line(f"sort: operands must have equal shapes, got {fmt_avals(operands)}")
        )
    if not 1 <= num_keys <= len(operands):
        raise BluValueError(
            with_user_line(f"sort: num_keys={num_keys} but there are {len(operands)} operands")
        )
    x = operands[0]
    if not 0 <= dimension < x.ndim:
        raise BluValueError(
            with_user_line(f"sort: dimension {dimension} out of range for {x.str_short()}")
        )
    return list(operands)


@sort_p.def_jvp
def _sort_jvp(primals, tangents, *, dimension, is_stable, num_keys):
    """Sort an iota along with the operands to get the permutation; gather the tangents."""
    shape = get_aval(primals[0]).shape
    n = shape[dimension]
    iota = broadcast_in_dim(np.arange(n, dtype=_index_dtype(n)), shape, (dimension,))
    *outs, perm = sort_p.bind(
        *primals, iota, dimension=dimension, is_stable=is_stable, num_keys=num_keys
    )
    t_outs = [
        Zero(tangent_aval(get_aval(o)))
        if isinstance(t, Zero)
        else take_along_axis_p.bind(t, perm, axis=dimension)
        for o, t in zip(outs, tangents)
    ]
    return outs, t_outs


@sort_p.def_batch
def _sort_batch(axis_size, args, dims, *, dimension, **params):
    args = [bdim_to_front(a, d, axis_size) for a, d in zip(args, dims)]
    outs = sort_p.bind(*args, dimension=dimension + 1, **params)
    return outs, [0] * len(outs)


def sort(
    operand: Any | Sequence[Any], dimension: int = -1, is_stable: bool = True, num_keys: int = 1
) -> Any:
    """Sort along ``dimension``; several operands are sorted together by their first keys.

    Args:
        operand: an array, or a sequence of arrays of one shape (any dtypes).
        dimension: the axis to sort along (negative counts from the end).
        is_stable: kept for JAX compatibility; the sort is always stable.
        num_keys: the first ``num_keys`` operands are the keys, compared lexicographically;
            the others are permuted alongside.

    Returns:
        The sorted array (for one array), else a tuple of sorted arrays. Float keys put NaN
        last, like numpy. Derivatives flow to every float operand through the permutation.

    Raises:
        BluShapeError: operands of different shapes. BluValueError: bad dimension/num_keys.
    """
    single = not isinstance(operand, (tuple, list))
    operands = (operand,) if single else tuple(operand)
    if not operands:
        raise BluValueError(with_user_line("sort: needs at least one operand"))
    nd = get_aval(operands[0]).ndim
    dimension, num_keys = (
        dtypes.static_int(dimension, "sort: dimension"),
        dtypes.static_int(num_keys, "sort: num_keys"),
    )
    if not -nd <= dimension < nd:
        raise BluValueError(
            with_user_line(
                f"sort: dimension {dimension} out of range for {get_aval(operands[0]).str_short()}"
            )
        )
    outs = sort_p.bind(
        *operands, dimension=dimension % nd, is_stable=bool(is_stable), num_keys=num_keys
    )
    return outs[0] if single else tuple(outs)


def sort_key_val(keys: Any, values: Any, dimension: int = -1, is_stable: bool = True) -> tuple:
    """Sort ``keys`` along ``dimension`` and permute ``values`` alike; returns (keys, values)."""
    return sort((keys, values), dimension, is_stable, num_keys=1)


# ---- top_k -------------------------------------------------------------------------------------

top_k_p = Primitive("top_k", multiple_results=True)


@top_k_p.def_impl
def _top_k_impl(x: np.ndarray, *, k: int):
    # Descending order with ties by lower index: a stable ascending sort of the reversed array,
    # read backwards. NaN sorts last ascending, so it comes first here (it is the "largest").
    n = x.shape[-1]
    order = np.argsort(_sortable(x)[..., ::-1], axis=-1, kind="stable")
    idx = (n - 1 - order)[..., ::-1][..., :k]
    return [np.take_along_axis(x, idx, axis=-1), idx.astype(np.int32)]


@top_k_p.def_abstract_eval
def _top_k_abstract_eval(x: ShapedArray, *, k: int):
    if x.ndim == 0:
        raise BluShapeError(
            with_user_line(f"top_k: operand must have rank >= 1, got {x.str_short()}")
        )
    if not 0 <= k <= x.shape[-1]:
        raise BluValueError(
            with_user_line(f"top_k: k={k} must be in [0, {x.shape[-1]}] for {x.str_short()}")
        )
    shape = x.shape[:-1] + (k,)
    return [ShapedArray(shape, x.dtype, x.weak_type), ShapedArray(shape, dtypes.int32)]


@top_k_p.def_jvp
def _top_k_jvp(primals, tangents, *, k):
    (x,), (t,) = primals, tangents
    values, idx = top_k_p.bind(x, k=k)
    if isinstance(t, Zero):
        return [values, idx], [Zero(tangent_aval(get_aval(values))), Zero(get_aval(idx))]
    t_values = take_along_axis_p.bind(t, idx, axis=get_aval(x).ndim - 1)
    return [values, idx], [t_values, Zero(get_aval(idx))]


@top_k_p.def_batch
def _top_k_batch(axis_size, args, dims, *, k):
    (x,), (d,) = args, dims
    if d == get_aval(x).ndim - 1:  # the batch axis must not be the one searched
        x, d = moveaxis(x, d, 0), 0
    values, idx = top_k_p.bind(x, k=k)
    return [values, idx], [d, d]


def top_k(x: Any, k: int, *, axis: int = -1) -> tuple[Any, Any]:
    """The ``k`` largest entries along ``axis`` (the last by default), largest first; ties by
    lower index.

    Args:
        x: array of rank >= 1, any dtype; NaN counts as the largest.
        k: how many, ``0 <= k <= n`` (``n`` the size of ``axis``).
        axis: the searched axis, negative counting from the end (JAX's ``axis=``).

    Returns:
        ``(values, indices)``: ``x``'s shape with ``k`` along ``axis``; indices are int32.
        ``values`` is differentiable (the tangent is gathered at ``indices``).

    Raises:
        BluShapeError: ``x`` is 0-d. BluValueError: ``k`` or ``axis`` out of range.
    """
    k = dtypes.static_int(k, "top_k: k")
    axis = dtypes.static_int(axis, "top_k: axis")
    ndim = get_aval(x).ndim
    if ndim == 0 or axis in (-1, ndim - 1):
        values, idx = top_k_p.bind(x, k=k)
        return values, idx
    if not -ndim <= axis < ndim:
        raise BluValueError(
            with_user_line(f"top_k: axis {axis} out of range for {get_aval(x).str_short()}")
        )
    axis %= ndim
    perm = tuple(i for i in range(ndim) if i != axis) + (axis,)
    back = tuple(perm.index(i) for i in range(ndim))
    values, idx = top_k_p.bind(transpose(x, perm), k=k)
    return transpose(values, back), transpose(idx, back)


# ---- approx_max_k / approx_min_k ---------------------------------------------------------------


def _approx_k(name: str, operand: Any, k: Any, reduction_dimension: Any) -> tuple[Any, int, tuple]:
    """The checked arguments: ``k``, and ``operand`` with the reduction dimension moved last,
    with the permutation that moves it back."""
    aval = get_aval(operand)
    k = dtypes.static_int(k, f"{name}: k")
    dim = dtypes.static_int(reduction_dimension, f"{name}: reduction_dimension")
    if aval.ndim == 0:
        raise BluShapeError(
            with_user_line(f"{name}: operand must have rank >= 1, got {aval.str_short()}")
        )
    if not dtypes.is_float(aval.dtype):
        raise BluTypeError(
            with_user_line(f"{name}: operand must be a float array, got {aval.str_short()}")
        )
    if not -aval.ndim <= dim < aval.ndim:
        raise BluValueError(
            with_user_line(f"{name}: reduction_dimension {dim} out of range for {aval.str_short()}")
        )
    dim %= aval.ndim
    if not 1 <= k <= aval.shape[dim]:
        raise BluValueError(
            with_user_line(
                f"{name}: k={k} must be in [1, {aval.shape[dim]}] (the size of "
                f"reduction_dimension {dim}) for {aval.str_short()}"
            )
        )
    perm = tuple(i for i in range(aval.ndim) if i != dim) + (dim,)
    back = tuple(perm.index(i) for i in range(aval.ndim))
    return transpose(operand, perm), k, back


def approx_max_k(
    operand: Any,
    k: int,
    reduction_dimension: int = -1,
    recall_target: float = 0.95,
    reduction_input_size_override: int = -1,
    aggregate_to_topk: bool = True,
) -> tuple[Any, Any]:
    """The ``k`` largest entries of ``operand`` along ``reduction_dimension`` and their indices
    (``jax.lax.approx_max_k``), computed exactly: ``top_k`` along that dimension.

    JAX's approximation (TPU's) is a hint: ``recall_target`` (the fraction of the true top
    ``k`` that must be found), ``reduction_input_size_override`` and ``aggregate_to_topk`` (with
    False, JAX may return more than ``k`` results, "implementation defined") are accepted and
    do not change the result, which has recall 1 and exactly ``k`` entries.

    Args:
        operand: float array of rank >= 1.
        k: how many, ``1 <= k <= operand.shape[reduction_dimension]``.
        reduction_dimension: the searched axis (negative counts from the end).

    Returns:
        ``(values, indices)``: ``operand``'s shape with ``k`` along ``reduction_dimension``,
        largest first, ties by lower index, NaN counting as the largest (as ``top_k``);
        ``indices`` int32. ``values`` is differentiable (the tangent is gathered at
        ``indices``).

    Raises:
        BluShapeError: a 0-d operand. BluTypeError: a non-float operand, or ``k`` not an int.
        BluValueError: ``k`` or ``reduction_dimension`` out of range.
    """
    x, k, back = _approx_k("approx_max_k", operand, k, reduction_dimension)
    values, idx = top_k(x, k)
    return transpose(values, back), transpose(idx, back)


def approx_min_k(
    operand: Any,
    k: int,
    reduction_dimension: int = -1,
    recall_target: float = 0.95,
    reduction_input_size_override: int = -1,
    aggregate_to_topk: bool = True,
) -> tuple[Any, Any]:
    """The ``k`` smallest entries of ``operand`` along ``reduction_dimension`` and their
    indices (``jax.lax.approx_min_k``), computed exactly by a stable sort; see
    ``approx_max_k`` for the arguments. Smallest first, ties by lower index, NaN counting as
    the largest (it comes last, as in ``sort``)."""
    x, k, back = _approx_k("approx_min_k", operand, k, reduction_dimension)
    shape = get_aval(x).shape
    last = len(shape) - 1
    _, order = sort((x, iota(dtypes.int32, shape, last)), dimension=last, num_keys=1)
    first_k = iota(dtypes.int32, shape[:-1] + (k,), last)
    idx = take_along_axis(order, first_k, last)
    return transpose(take_along_axis(x, idx, last), back), transpose(idx, back)
