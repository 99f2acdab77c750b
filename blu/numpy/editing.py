"""jax.numpy's functional editing and choosing: ``choose``, ``delete``, ``insert``,
``put``, ``piecewise``, ``compress``,
``extract``, ``place``, ``fill_diagonal``.

Each returns a new array (blu arrays are immutable, as JAX's); indices that decide the result's
shape must be static, as in JAX.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from blu import lax
from blu.core import dtypes
from blu.core.array import Array
from blu.core.errors import (
    BluIndexError,
    BluShapeError,
    BluTypeError,
    BluValueError,
    with_user_line,
)
from blu.core.interpreter import Tracer, get_aval
from blu.numpy._promote import (
    asarray_operand,
    asarray_operand_in,
    broadcast_shapes,
    broadcast_to,
    canonicalize_axis,
    concrete_value,
    promote_dtypes,
)
from blu.numpy.logic import to_bool
from blu.numpy.manipulation import concatenate, moveaxis, ravel
from blu.numpy.selection import nonzero, take
from blu.numpy.sorting import argsort, sort
from blu.numpy.ufuncs import _where, add, clip, mod, subtract

__all__ = [
    "choose",
    "delete",
    "insert",
    "put",
    "piecewise",
    "compress",
    "extract",
    "place",
    "fill_diagonal",
]


def _int_operand(x: Any, name: str, arg: str) -> Any:
    """``x`` as an array of integers.

    Raises:
        BluTypeError: ``x`` is not of an integer dtype.
    """
    x = asarray_operand(x)
    aval = get_aval(x)
    if not dtypes.is_int(aval.dtype):
        raise BluTypeError(
            with_user_line(f"{name}: {arg} must be integers, got {aval.str_short()}")
        )
    return x


def _values_as(x: Any, dt: Any) -> Any:
    """``x`` converted to the dtype ``dt``; Python scalars and lists through numpy, straight to
    ``dt`` (not through float32, which would round ``0.1`` for a float64 array)."""
    if isinstance(x, (Tracer, Array)):
        return lax.convert_element_type(x, dt)
    return asarray_operand(np.asarray(np.asarray(x).astype(dt)))


def choose(a: Any, choices: Any, out: None = None, mode: str = "raise") -> Any:
    """``choices[a[i]][i]`` for every ``i`` of the broadcast shape of ``a`` and the choices
    (``jax.numpy.choose``), in the choices' promoted dtype.

    Args:
        a: integer indices into ``choices``.
        choices: a sequence of arrays (or an array, split along its first axis), broadcastable
            with ``a`` and each other.
        out: must be None (arrays are immutable).
        mode: 'raise' (indices outside ``[0, n)`` are an error; needs a concrete ``a``, so not
            under ``jit``, as JAX), 'wrap' (modulo ``n``) or 'clip'.

    Differentiable in ``choices``.

    Raises:
        BluTypeError: ``a`` is not integer. BluIndexError: an index out of range with 'raise'.
        BluValueError: no choices, an unknown ``mode``, or ``out``.
        ConcretizationError: a traced ``a`` with ``mode='raise'``.
        BluShapeError: shapes that do not broadcast.
    """
    if out is not None:
        raise BluValueError(with_user_line("choose: out= is not supported (arrays are immutable)"))
    if mode not in ("raise", "wrap", "clip"):
        raise BluValueError(
            with_user_line(f"choose: mode must be 'raise', 'wrap' or 'clip', got {mode!r}")
        )
    a = _int_operand(a, "choose", "a (the choice indices)")
    if isinstance(choices, (list, tuple)):
        cases = list(choices)
    else:
        arr = asarray_operand(choices)
        if get_aval(arr).ndim == 0:
            raise BluValueError(with_user_line("choose: choices must be a sequence of arrays"))
        cases = [lax.index_in_dim(arr, i, 0, keepdims=False) for i in range(get_aval(arr).shape[0])]
    n = len(cases)
    if n == 0:
        raise BluValueError(with_user_line("choose: choices is empty"))
    if mode == "raise":
        av = concrete_value(a, "choose with mode='raise' (use mode='wrap' or 'clip' under jit)")
        if av.size and (av.min() < 0 or av.max() >= n):
            raise BluIndexError(
                with_user_line(
                    f"choose: a (shape {av.shape}) has entries outside [0, {n}) for {n} "
                    f"choices (min {av.min()}, max {av.max()}); use mode='wrap' or 'clip'"
                )
            )
    elif mode == "wrap":
        a = mod(a, n)
    else:
        a = clip(a, 0, n - 1)
    cases = promote_dtypes(*cases)
    shape = broadcast_shapes(get_aval(a).shape, *(get_aval(c).shape for c in cases))
    which = broadcast_to(lax.convert_element_type(asarray_operand(a), dtypes.int32), shape)
    return lax.select_n(which, *(broadcast_to(c, shape) for c in cases))


def _axis_of(arr: Any, axis: Any, name: str) -> tuple[Any, int]:
    """``arr`` (raveled when ``axis`` is None) and the non-negative axis."""
    arr = asarray_operand(arr)
    if axis is None:
        return ravel(arr), 0
    return arr, canonicalize_axis(axis, get_aval(arr).ndim, name)


def delete(arr: Any, obj: Any, axis: int | None = None, *, assume_unique_indices: bool = False):
    """``arr`` without the entries ``obj`` along ``axis`` (the raveled array when None), as
    ``jax.numpy.delete``.

    Args:
        arr: any array.
        obj: an int, a slice, integer indices (negative count from the end) or a bool mask of
            the axis' length. The result's length depends on them, so array indices must be
            concrete, unless ``assume_unique_indices`` (JAX's): then traced integer indices
            work, each deleted once, and must be distinct and in range (unchecked).
        axis: the axis; None ravels ``arr`` first.

    Differentiable in ``arr``.

    Raises:
        BluIndexError: an index out of range. BluShapeError: a mask of the wrong shape.
        BluTypeError: indices neither integer nor bool.
        ConcretizationError: traced indices without ``assume_unique_indices``.
        BluAxisError: ``axis`` out of range.
    """
    a, ax = _axis_of(arr, axis, "delete")
    shape = get_aval(a).shape
    n = shape[ax]
    if isinstance(obj, slice):
        keep = np.ones(n, bool)
        keep[obj] = False
        return take(a, np.nonzero(keep)[0].astype(np.int32), axis=ax)
    if dtypes.is_int_scalar(obj):
        i = operator.index(obj)
        if not -n <= i < n:
            raise BluIndexError(
                with_user_line(
                    f"delete: index obj={i} is out of bounds for axis {ax} with size {n} "
                    f"(an array of shape {shape})"
                )
            )
        i %= n
        lo = lax.slice_in_dim(a, 0, i, axis=ax)
        return concatenate([lo, lax.slice_in_dim(a, i + 1, n, axis=ax)], axis=ax)
    if isinstance(obj, Tracer) and assume_unique_indices:
        idx = _int_operand(obj, "delete", "obj (the indices)")
        idx = ravel(lax.convert_element_type(idx, dtypes.int32))
        m = get_aval(idx).size
        idx = sort(_where(lax.lt(idx, lax.full_like(idx, 0)), add(idx, n), idx))
        idx = subtract(idx, lax.iota(dtypes.int32, (m,), 0))  # the k-th deleted: before k kept ones
        kept = lax.iota(dtypes.int32, (n - m,), 0)
        shift = lax.ge(lax.broadcast_in_dim(kept, (m, n - m), (1,)),
                       lax.broadcast_in_dim(idx, (m, n - m), (0,)))  # fmt: skip
        shift = lax.reduce_sum(lax.convert_element_type(shift, dtypes.int32), (0,))
        return take(a, lax.add(kept, shift), axis=ax)
    what = "delete (obj); pass assume_unique_indices=True for distinct traced integer indices"
    idx = concrete_value(obj, what)
    if idx.size == 0 and not hasattr(obj, "dtype"):
        idx = idx.astype(np.int32)  # delete(a, []): numpy's empty index list
    if idx.dtype == np.bool_:
        if idx.shape != (n,):
            raise BluShapeError(
                with_user_line(
                    f"delete: a bool obj must be 1-d of the length of axis {ax} ({n}), got "
                    f"shape {idx.shape} (an array of shape {shape})"
                )
            )
        keep = ~idx
    elif idx.dtype.kind in "iu":
        bad = (idx < -n) | (idx >= n)
        if bad.any():
            raise BluIndexError(
                with_user_line(
                    f"delete: index {idx[bad].reshape(-1)[0]} in obj is out of bounds for axis "
                    f"{ax} with size {n} (an array of shape {shape})"
                )
            )
        keep = np.ones(n, bool)
        keep[idx.reshape(-1)] = False
    else:
        raise BluTypeError(
            with_user_line(f"delete: obj must be integer or bool indices, got {idx.dtype}")
        )
    return take(a, np.nonzero(keep)[0].astype(np.int32), axis=ax)


def insert(arr: Any, obj: Any, values: Any, axis: int | None = None) -> Any:
    """``arr`` with ``values`` inserted before the indices ``obj`` along ``axis`` (the raveled
    array when None), as ``jax.numpy.insert``.

    Args:
        arr: any array.
        obj: an int, a slice or 1-d integer indices (negative count from the end; each index
            at most the axis' length). Traced indices work (their count is static); concrete
            ones out of ``[-n, n]`` are an error, traced ones are clipped into it (JAX's).
            A scalar ``obj`` inserts ``values`` as a block, numpy's rule.
        values: broadcast to the inserted slots and converted to ``arr``'s dtype (as numpy and
            JAX).
        axis: the axis; None ravels ``arr`` first.

    Differentiable in ``arr`` and ``values``.

    Raises:
        BluIndexError: a concrete index out of range. BluTypeError: non-integer indices.
        BluShapeError: ``obj`` of more than one dimension, or values that do not broadcast.
        BluAxisError: ``axis`` out of range.
    """
    a, ax = _axis_of(arr, axis, "insert")
    shape = get_aval(a).shape
    n = shape[ax]
    if isinstance(obj, slice):
        idx = np.arange(*obj.indices(n), dtype=np.int32)
    elif isinstance(obj, Tracer):
        idx = _int_operand(obj, "insert", "obj (the indices)")
    else:
        idx = np.asarray(obj)
        if idx.size == 0 and not hasattr(obj, "dtype"):
            idx = idx.astype(np.int32)  # insert(a, [], []): numpy's empty index list
        if idx.dtype.kind not in "iu":
            raise BluTypeError(
                with_user_line(f"insert: obj must be integer indices, got {idx.dtype} ({obj!r})")
            )
        bad = (idx < -n) | (idx > n)
        if bad.any():
            raise BluIndexError(
                with_user_line(
                    f"insert: index {idx[bad].reshape(-1)[0]} in obj is out of bounds for axis "
                    f"{ax} with size {n} (an array of shape {shape})"
                )
            )
        idx = idx.astype(np.int32)
    if get_aval(idx).ndim > 1:
        raise BluShapeError(
            with_user_line(
                f"insert: obj must be a slice, a scalar or 1-d indices, got shape "
                f"{get_aval(idx).shape}"
            )
        )
    dt = get_aval(a).dtype
    v = _values_as(values, dt)
    if get_aval(v).ndim < len(shape):  # numpy's ndmin: leading dimensions of 1
        vs = get_aval(v).shape
        v = lax.reshape(v, (1,) * (len(shape) - len(vs)) + vs)
    idx = lax.convert_element_type(asarray_operand(idx), dtypes.int32)
    if get_aval(idx).size == 1:
        if get_aval(idx).ndim == 0:
            v = moveaxis(v, 0, ax)
        idx = lax.broadcast_in_dim(ravel(idx), (get_aval(v).shape[ax],), (0,))
    m, vm = get_aval(idx).shape[0], get_aval(v).shape[ax]
    k = m  # (a single index was repeated to the values' length above)
    slots = shape[:ax] + (k,) + shape[ax + 1 :]
    try:
        broadcast_shapes(get_aval(v).shape, slots)
        if vm not in (1, k):
            raise BluShapeError("")
    except BluShapeError:
        raise BluShapeError(
            with_user_line(
                f"insert: values of shape {np.shape(values)} do not broadcast to the "
                f"{k} inserted slots {slots} along axis {ax} (arr of shape {shape}, "
                f"{m} indices in obj)"
            )
        ) from None
    idx = broadcast_to(idx, (k,))
    idx = clip(_where(lax.lt(idx, lax.full_like(idx, 0)), add(idx, n), idx), 0, n)
    # the k-th inserted value (in index order, stable) lands k places further on
    at = idx.at[argsort(idx)].add(lax.iota(dtypes.int32, (k,), 0))
    kept = lax.full((n + k,), True, dtypes.bool_).at[at].set(False)
    (arr_at,) = nonzero(kept, size=n)
    out_shape = shape[:ax] + (n + k,) + shape[ax + 1 :]
    out = lax.full(out_shape, 0, dt)
    lead = (slice(None),) * ax
    out = out.at[lead + (at,)].set(v)
    return out.at[lead + (arr_at,)].set(a)


def put(a: Any, ind: Any, v: Any, mode: str | None = None, *, inplace: bool = True) -> Any:
    """A copy of ``a`` with ``ravel(a)[ind] = v`` (``jax.numpy.put``); JAX's signature, whose
    ``inplace`` must be False: blu arrays are immutable, so the update is returned.

    Args:
        a: any array.
        ind: integer indices into the raveled ``a`` (negative count from the end).
        v: values converted to ``a``'s dtype, repeated cyclically to the number of indices
            (numpy's rule).
        mode: None (JAX's: out-of-range indices are dropped), 'clip' or 'wrap'. numpy's
            'raise' is not supported, as in JAX.
        inplace: must be False.

    Differentiable in ``a`` and ``v``. Repeated indices write one of their values
    (unspecified which, as in JAX).

    Raises:
        BluValueError: ``inplace`` is not False, or an unknown or 'raise' ``mode``.
        BluTypeError: ``ind`` is not integer.
    """
    if inplace:
        raise BluValueError(
            with_user_line(
                "put: blu arrays are immutable, so put cannot change a in place; pass "
                "inplace=False to get the updated array (JAX's rule)"
            )
        )
    if mode not in (None, "clip", "wrap"):
        hint = " (JAX does not support it either)" if mode == "raise" else ""
        raise BluValueError(
            with_user_line(f"put: mode must be None, 'clip' or 'wrap', got {mode!r}{hint}")
        )
    arr = asarray_operand(a)
    shape, dt = get_aval(arr).shape, get_aval(arr).dtype
    ind = ravel(_int_operand(ind, "put", "ind (the indices)"))
    vals = ravel(_values_as(v, dt))
    size, m, nv = get_aval(arr).size, get_aval(ind).size, get_aval(vals).size
    if not (size and m and nv):
        return arr
    if nv != m:  # numpy repeats (or cuts) v to the number of indices
        vals = take(vals, np.arange(m, dtype=np.int32) % nv)
    if get_aval(ind).dtype != dtypes.int32:
        ind = clip(ind, -size - 1, size) if mode != "wrap" else mod(ind, size)
        ind = lax.convert_element_type(ind, dtypes.int32)
    if mode == "wrap":
        ind = mod(ind, size)
    elif mode == "clip":
        ind = clip(ind, 0, size - 1)
    out = lax.reshape(arr, (size,)).at[ind].set(vals, mode="drop")
    return lax.reshape(out, shape)


def piecewise(
    x: Any, condlist: Any, funclist: Sequence[Callable[..., Any] | Any], *args: Any, **kw: Any
) -> Any:
    """``funclist[i](x)`` where ``condlist[i]`` holds, a later condition winning over an
    earlier one, and the extra last entry of ``funclist`` (the default, else 0) where none
    holds (``jax.numpy.piecewise``), in ``x``'s dtype and shape.

    Args:
        x: the input.
        condlist: bool arrays broadcastable to ``x`` (a list, or an array whose first axis
            lists them; one array of ``x``'s rank is one condition).
        funclist: ``len(condlist)`` or ``len(condlist) + 1`` entries, each a function called
            as ``f(x, *args, **kw)`` or a constant.

    As JAX, every function is applied to all of ``x`` (under ``jit`` too) and the results are
    selected, so a function must be defined (though its value is unused) off its piece.
    Differentiable in ``x`` and whatever the functions close over.

    Raises:
        BluValueError: ``funclist`` of the wrong length.
        BluShapeError: a condition that does not broadcast to ``x``.
    """
    x = asarray_operand(x)
    shape, dt = get_aval(x).shape, get_aval(x).dtype
    if isinstance(condlist, (list, tuple)):
        conds = list(condlist)
    else:
        c = asarray_operand(condlist)
        if get_aval(c).ndim == len(shape) + 1:
            conds = [lax.index_in_dim(c, i, 0, False) for i in range(get_aval(c).shape[0])]
        else:
            conds = [c]
    nc, nf = len(conds), len(funclist)
    if nf == nc + 1:
        funcs = [funclist[-1], *funclist[:-1]]
    elif nf == nc:
        funcs = [0, *funclist]
    else:
        raise BluValueError(
            with_user_line(
                f"piecewise: with {nc} condition(s), funclist needs {nc} or {nc + 1} "
                f"entries, got {nf}"
            )
        )
    which = lax.full(shape, 0, dtypes.int32)
    for i, c in enumerate(conds):
        c = to_bool(asarray_operand(c))
        try:
            c = broadcast_to(c, shape)
        except BluShapeError:
            raise BluShapeError(
                with_user_line(
                    f"piecewise: condlist[{i}] of shape {get_aval(c).shape} does not broadcast "
                    f"to x's shape {shape}"
                )
            ) from None
        which = lax.select(c, lax.full(shape, i + 1, dtypes.int32), which)
    cases = []
    for f in funcs:
        val = f(x, *args, **kw) if callable(f) else f
        val = lax.convert_element_type(asarray_operand_in(val, dt), dt)
        cases.append(broadcast_to(val, shape))
    return lax.select_n(which, *cases)


def compress(
    condition: Any,
    a: Any,
    axis: int | None = None,
    *,
    size: int | None = None,
    fill_value: Any = 0,
    out: None = None,
) -> Any:
    """The slices of ``a`` along ``axis`` (the raveled ``a`` when None) where the 1-d
    ``condition`` holds (``jax.numpy.compress``); a ``condition`` shorter than the axis counts
    as False past its end.

    The result's length depends on ``condition``: it must be concrete unless ``size`` is given
    (JAX's), which keeps the first ``size`` selected slices and pads with ``fill_value``.
    Differentiable in ``a``.

    Raises:
        BluShapeError: ``condition`` is not 1-d. BluIndexError: ``condition`` is longer than
        the axis and true past its end. ConcretizationError: a traced ``condition`` without
        ``size``. BluValueError: ``out``. BluAxisError: ``axis`` out of range.
    """
    if out is not None:
        raise BluValueError(
            with_user_line("compress: out= is not supported (arrays are immutable)")
        )
    cond = condition if isinstance(condition, Tracer) else np.asarray(condition)
    if get_aval(cond).ndim != 1:
        raise BluShapeError(
            with_user_line(f"compress: condition must be 1-d, got shape {get_aval(cond).shape}")
        )
    # (a concrete condition stays numpy: under jit, lax ops would make it a tracer)
    cond = to_bool(cond) if isinstance(cond, Tracer) else cond != 0
    arr, ax = _axis_of(a, axis, "compress")
    shape = get_aval(arr).shape
    n, c = shape[ax], get_aval(cond).shape[0]
    if c > n:
        extra = concrete_value(cond, "compress (a condition longer than the axis)")[n:]
        if extra.any():
            raise BluIndexError(
                with_user_line(
                    f"compress: condition (length {c}) is true past the end of axis {ax} of "
                    f"size {n} (an array of shape {shape})"
                )
            )
        cond = cond[:n]
    elif c < n:
        arr = lax.slice_in_dim(arr, 0, c, axis=ax)
    if size is None:
        keep = concrete_value(cond, "compress without size= (the result's length depends on it)")
        return take(arr, np.nonzero(keep)[0].astype(np.int32), axis=ax)
    (idx,) = nonzero(cond, size=size, fill_value=min(c, n))
    return take(arr, idx, axis=ax, mode="fill", fill_value=fill_value)


def extract(condition: Any, arr: Any, *, size: int | None = None, fill_value: Any = 0) -> Any:
    """The elements of the raveled ``arr`` where the raveled ``condition`` is nonzero
    (``jax.numpy.extract``): ``compress(ravel(condition), ravel(arr))``; a traced
    ``condition`` needs ``size`` (padding with ``fill_value``), as JAX.

    Raises:
        as :func:`compress`.
    """
    cond = condition if isinstance(condition, Tracer) else np.asarray(condition).reshape(-1)
    if isinstance(cond, Tracer):
        cond = ravel(cond)
    return compress(cond, ravel(asarray_operand(arr)), size=size, fill_value=fill_value)


def place(arr: Any, mask: Any, vals: Any, *, inplace: bool = True) -> Any:
    """A copy of ``arr`` whose elements where ``mask`` is nonzero take the raveled ``vals`` in
    order, repeated cyclically (``jax.numpy.place``); JAX's signature, whose ``inplace`` must be
    False: blu arrays are immutable, so the update is returned.

    Works on traced masks (no result length depends on them). Differentiable in ``arr`` and
    ``vals``; ``vals`` is converted to ``arr``'s dtype.

    Raises:
        BluValueError: ``inplace`` is not False, or an empty ``vals``.
        BluShapeError: ``mask`` and ``arr`` differ in size.
    """
    if inplace:
        raise BluValueError(
            with_user_line(
                "place: blu arrays are immutable, so place cannot change arr in place; pass "
                "inplace=False to get the updated array (JAX's rule)"
            )
        )
    a = asarray_operand(arr)
    shape, dt = get_aval(a).shape, get_aval(a).dtype
    data, m, v = ravel(a), ravel(to_bool(asarray_operand(mask))), ravel(_values_as(vals, dt))
    if get_aval(m).size != get_aval(data).size:
        raise BluShapeError(
            with_user_line(
                f"place: mask (shape {np.shape(mask)}) must have as many elements as arr "
                f"(shape {shape})"
            )
        )
    if get_aval(v).size == 0:
        raise BluValueError(with_user_line("place: vals is empty (JAX's rule)"))
    if not get_aval(data).size:
        return a
    # the k-th masked element takes vals[k % len(vals)]
    k = lax.sub(
        lax.cumsum(lax.convert_element_type(m, dtypes.int32), 0),
        lax.full_like(data, 1, dtypes.int32),
    )
    got = take(v, _where(m, k, lax.full_like(k, 0)), mode="wrap")
    return lax.reshape(lax.select(m, got, data), shape)


def fill_diagonal(a: Any, val: Any, wrap: bool = False, *, inplace: bool = True) -> Any:
    """A copy of ``a`` with its main diagonal set to ``val`` (raveled, repeated cyclically,
    converted to ``a``'s dtype), as ``jax.numpy.fill_diagonal``, whose ``inplace`` must be
    False: blu arrays are immutable, so the update is returned.

    ``a`` is 2-d, or of more dimensions all of one length (then ``a[i, i, ..., i]``). ``wrap``
    (numpy's) continues the diagonal of a tall matrix below a gap row every ``cols + 1`` rows.
    Differentiable in ``a`` and ``val``.

    Raises:
        BluValueError: ``inplace`` is not False, or an empty ``val``.
        BluShapeError: ``a`` has fewer than 2 dimensions, or more of different lengths.
    """
    if inplace:
        raise BluValueError(
            with_user_line(
                "fill_diagonal: blu arrays are immutable, so fill_diagonal cannot change a in "
                "place; pass inplace=False to get the updated array (JAX's rule)"
            )
        )
    a = asarray_operand(a)
    shape, dt = get_aval(a).shape, get_aval(a).dtype
    if len(shape) < 2:
        raise BluShapeError(
            with_user_line(f"fill_diagonal: a must be at least 2-d, got shape {shape}")
        )
    if len(shape) == 2:  # numpy's flat stride of the diagonal, and where it stops
        step, end = shape[1] + 1, (None if wrap else shape[1] * shape[1])
    elif len(set(shape)) != 1:
        raise BluShapeError(
            with_user_line(
                f"fill_diagonal: all dimensions of a must be of equal length, got shape {shape}"
            )
        )
    else:
        step, end = 1 + int(np.cumprod(shape[:-1]).sum()), None
    size = math.prod(shape)
    pos = np.arange(size, dtype=np.int32)[:end:step]
    v = ravel(_values_as(val, dt))
    nv = get_aval(v).size
    if nv == 0:
        raise BluValueError(with_user_line("fill_diagonal: val is empty"))
    if not pos.size:
        return a
    v = take(v, np.arange(pos.size, dtype=np.int32) % nv)
    return lax.reshape(lax.reshape(a, (size,)).at[pos].set(v), shape)
