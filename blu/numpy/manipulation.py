"""Shape manipulation: reshape, transpose, concatenate/stack/split, tile/repeat, flip/roll,
astype, and the shape/ndim/size queries (``pad`` is in ``padding``).

Everything lowers to ``blu.lax`` shape primitives (reshape, transpose, broadcast_in_dim,
concatenate, slice, rev, pad, gather), so it stages, differentiates and batches.
"""

from __future__ import annotations

import builtins
import math
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from blu import lax
from blu.core import dtypes
from blu.core.errors import BluShapeError, BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import Tracer, get_aval
from blu.lax.casts import python_scalar_in
from blu.numpy._promote import (
    asarray_operand,
    asarray_operands,
    broadcast_shapes,
    broadcast_to,
    canonicalize_axes,
    canonicalize_axis,
    concrete_value,
    is_concrete,
    promote_dtypes,
)
from blu.numpy.devices import to_device
from blu.numpy.ufuncs import add, mod, subtract

# fmt: off
__all__ = [
    "reshape", "ravel", "transpose", "permute_dims", "matrix_transpose", "moveaxis", "swapaxes",
    "expand_dims", "squeeze", "broadcast_to", "broadcast_arrays", "broadcast_shapes",
    "concatenate", "concat", "stack", "hstack", "vstack", "dstack", "column_stack", "split",
    "array_split", "hsplit", "vsplit", "dsplit", "flip", "fliplr", "flipud", "roll",
    "atleast_1d", "atleast_2d", "atleast_3d", "shape", "ndim", "size", "astype", "append"
]
# fmt: on


def _aval(x: Any):
    return get_aval(x)


def astype(x: Any, dtype: Any, copy: bool = True, *, device: Any = None) -> Any:
    """``x`` cast to ``dtype`` (float -> int truncates toward zero, complex -> real keeps the
    real part; the result is not weak), on ``device`` if given (the Array API's keyword). A
    Python float cast to float64 is float64's value of it, and cast to int64 float64's
    truncated (JAX's with x64; ``lax.casts.python_scalar_in``)."""
    dtype = dtypes.canonicalize(dtype)
    out = lax.convert_element_type(asarray_operand(python_scalar_in(x, dtype)), dtype)
    if device is None:
        return out
    return to_device(out, device)


def shape(a: Any) -> tuple[int, ...]:
    """``a``'s shape as a tuple of ints (static: known while tracing)."""
    return _aval(asarray_operand(a)).shape


def ndim(a: Any) -> int:
    """``a``'s number of axes (static: known while tracing)."""
    return _aval(asarray_operand(a)).ndim


def size(a: Any, axis: int | None = None) -> int:
    """Number of elements of ``a`` (along ``axis`` when given); a static int."""
    s = shape(a)
    return math.prod(s) if axis is None else s[canonicalize_axis(axis, len(s), "size")]


# ---- reshape and axes --------------------------------------------------------------------------


def _resolve_shape(newshape: Any, total: int, old: tuple[int, ...]) -> tuple[int, ...]:
    if isinstance(newshape, Tracer):
        raise BluTypeError(with_user_line("reshape: the new shape must be static"))
    if isinstance(newshape, (int, np.integer)):
        newshape = (newshape,)
    try:
        dims = [operator.index(d) for d in newshape]
    except TypeError as e:
        raise BluTypeError(with_user_line(f"reshape: shape must be ints, got {newshape!r}")) from e
    unknown = [i for i, d in enumerate(dims) if d == -1]
    if len(unknown) > 1 or any(d < -1 for d in dims):
        raise BluValueError(with_user_line(f"reshape: invalid shape {tuple(dims)}"))
    if unknown:
        known = math.prod(d for d in dims if d != -1)
        if known == 0 or total % known:
            raise BluShapeError(
                with_user_line(f"reshape: cannot reshape array of shape {old} into {tuple(dims)}")
            )
        dims[unknown[0]] = total // known
    if math.prod(dims) != total:
        raise BluShapeError(
            with_user_line(f"reshape: cannot reshape array of shape {old} into {tuple(dims)}")
        )
    return tuple(dims)


def reshape(
    a: Any, shape: Any = None, order: str = "C", *, newshape: Any = None, copy: Any = None
) -> Any:
    """Reshape; one dimension may be -1 (inferred). ``order='C'`` (or 'A': blu arrays are
    always row-major) reads and writes the elements in row-major order, ``order='F'`` in
    column-major order. ``newshape`` is numpy's older name of ``shape``; ``copy`` is accepted
    for the Array API (blu arrays are immutable).

    Raises:
        BluShapeError: the sizes differ. BluValueError: ``order`` is not 'C', 'F' or 'A'.
    """
    del copy
    _check_order("reshape", order)
    if newshape is None:
        newshape = shape
    a = asarray_operand(a)
    aval = _aval(a)
    dims = _resolve_shape(newshape, aval.size, aval.shape)
    if order == "F":
        # column-major: reverse the axes, reshape row-major to the reversed shape, reverse back
        t = lax.transpose(a, tuple(reversed(range(aval.ndim))))
        out = lax.reshape(t, tuple(reversed(dims)))
        return lax.transpose(out, tuple(reversed(range(len(dims)))))
    return lax.reshape(a, dims)


def _check_order(name: str, order: Any) -> None:
    if order not in ("C", "F", "A"):
        raise BluValueError(with_user_line(f"{name}: order must be 'C', 'F' or 'A', got {order!r}"))


def ravel(a: Any, order: str = "C") -> Any:
    """The elements as a 1-D array, in row-major order (``order='C'``, or 'A': blu arrays are
    always row-major) or column-major order (``order='F'``).

    Raises:
        BluValueError: ``order`` is not 'C', 'F' or 'A'.
    """
    _check_order("ravel", order)
    a = asarray_operand(a)
    aval = _aval(a)
    if order == "F":
        a = lax.transpose(a, tuple(reversed(range(aval.ndim))))
    return lax.reshape(a, (aval.size,))


def transpose(a: Any, axes: Sequence[int] | None = None) -> Any:
    """Permute the axes (reverse them when ``axes`` is None)."""
    a = asarray_operand(a)
    nd = _aval(a).ndim
    if axes is None:
        perm = tuple(range(nd))[::-1]
    else:
        perm = canonicalize_axes(axes, nd, "transpose")
        if len(perm) != nd:
            raise BluValueError(
                with_user_line(f"transpose: axes {tuple(axes)} do not match {_aval(a).str_short()}")
            )
    return lax.transpose(a, perm)


permute_dims = transpose


def matrix_transpose(x: Any) -> Any:
    """Swap the last two axes."""
    return swapaxes(x, -1, -2)


def moveaxis(a: Any, source: Any, destination: Any) -> Any:
    """Move axes ``source`` to positions ``destination`` (ints or sequences of ints)."""
    a = asarray_operand(a)
    nd = _aval(a).ndim
    src = canonicalize_axes(source, nd, "moveaxis")
    dst = canonicalize_axes(destination, nd, "moveaxis")
    if len(src) != len(dst):
        raise BluValueError(with_user_line("moveaxis: source and destination differ in length"))
    perm = [i for i in range(nd) if i not in src]
    for d, s in sorted(zip(dst, src)):
        perm.insert(d, s)
    return lax.transpose(a, tuple(perm))


def swapaxes(a: Any, axis1: int, axis2: int) -> Any:
    """``a`` with axes ``axis1`` and ``axis2`` interchanged (a transpose)."""
    a = asarray_operand(a)
    nd = _aval(a).ndim
    i, j = canonicalize_axis(axis1, nd, "swapaxes"), canonicalize_axis(axis2, nd, "swapaxes")
    perm = list(range(nd))
    perm[i], perm[j] = j, i
    return lax.transpose(a, tuple(perm))


def expand_dims(a: Any, axis: Any) -> Any:
    """Insert size-1 axes at positions ``axis`` of the result."""
    a = asarray_operand(a)
    s = _aval(a).shape
    n_new = 1 if isinstance(axis, (int, np.integer)) else len(axis)
    axes = canonicalize_axes(axis, len(s) + n_new, "expand_dims")
    it = iter(s)
    return lax.reshape(a, tuple(1 if i in axes else next(it) for i in range(len(s) + n_new)))


def squeeze(a: Any, axis: Any = None) -> Any:
    """Drop size-1 axes (all of them, or those in ``axis``, which must have size 1).

    Raises:
        BluShapeError: an axis in ``axis`` does not have size 1.
    """
    a = asarray_operand(a)
    s = _aval(a).shape
    if axis is None:
        axes = tuple(i for i, d in enumerate(s) if d == 1)
    else:
        axes = canonicalize_axes(axis, len(s), "squeeze")
        bad = [i for i in axes if s[i] != 1]
        if bad:
            raise BluShapeError(
                with_user_line(f"squeeze: axis {bad[0]} of {_aval(a).str_short()} is not of size 1")
            )
    return lax.reshape(a, tuple(d for i, d in enumerate(s) if i not in axes))


def broadcast_arrays(*args: Any) -> list[Any]:
    """The arguments broadcast to their common shape (dtypes kept)."""
    args = [asarray_operand(a) for a in args]
    s = broadcast_shapes(*[_aval(a).shape for a in args])
    return [broadcast_to(a, s) for a in args]


def atleast_1d(*arys: Any) -> Any:
    """Each argument with at least 1 axis (a scalar becomes shape ``(1,)``); one array
    for one argument, else a list."""
    out = [reshape(a, (1,)) if ndim(a) == 0 else asarray_operand(a) for a in arys]
    return out[0] if len(out) == 1 else out


def atleast_2d(*arys: Any) -> Any:
    """Each argument with at least 2 axes (new axes in front: ``(n,)`` becomes
    ``(1, n)``); one array for one argument, else a list."""
    out = []
    for a in arys:
        a = asarray_operand(a)
        nd = _aval(a).ndim
        out.append(lax.reshape(a, (1,) * (2 - nd) + _aval(a).shape) if nd < 2 else a)
    return out[0] if len(out) == 1 else out


def atleast_3d(*arys: Any) -> Any:
    """Each argument with at least 3 axes (``(n,)`` becomes ``(1, n, 1)``, ``(m, n)``
    becomes ``(m, n, 1)``); one array for one argument, else a list."""
    out = []
    for a in arys:
        a = asarray_operand(a)
        s = _aval(a).shape
        if len(s) == 0:
            a = lax.reshape(a, (1, 1, 1))
        elif len(s) == 1:
            a = lax.reshape(a, (1, s[0], 1))
        elif len(s) == 2:
            a = lax.reshape(a, s + (1,))
        out.append(a)
    return out[0] if len(out) == 1 else out


# ---- joining and splitting ---------------------------------------------------------------------


def concatenate(arrays: Sequence[Any], axis: int | None = 0, dtype: Any = None) -> Any:
    """Join arrays along an existing axis (all are raveled when ``axis`` is None); dtypes
    promote.

    Raises:
        BluValueError: no arrays, or 0-d arrays. BluShapeError: other dimensions differ.
    """
    arrays = _unstack_if_array(arrays)
    if not arrays:
        raise BluValueError(with_user_line("concatenate: needs at least one array"))
    arrays = asarray_operands(*arrays)
    if axis is None:
        arrays = [ravel(a) for a in arrays]
        axis = 0
    arrays = promote_dtypes(*arrays)
    if dtype is not None:
        arrays = [astype(a, dtype) for a in arrays]
    nd = _aval(arrays[0]).ndim
    if nd == 0:
        raise BluValueError(with_user_line("concatenate: zero-dimensional arrays cannot be joined"))
    axis = canonicalize_axis(axis, nd, "concatenate")
    if len(arrays) == 1:
        return arrays[0]
    return lax.concatenate(arrays, axis)


concat = concatenate


def _unstack_if_array(arrays: Any) -> list:
    """An array given where a sequence of arrays is expected stands for its rows."""
    if hasattr(arrays, "shape") and not isinstance(arrays, (list, tuple)):
        a = asarray_operand(arrays)
        return [lax.index_in_dim(a, i, 0, keepdims=False) for i in range(_aval(a).shape[0])]
    return list(arrays)


def append(arr: Any, values: Any, axis: int | None = None) -> Any:
    """``concatenate([arr, values], axis)`` (both raveled when ``axis`` is None)."""
    return concatenate([arr, values], axis)


def stack(arrays: Sequence[Any], axis: int = 0, dtype: Any = None) -> Any:
    """Join arrays of one shape along a new axis.

    Raises:
        BluShapeError: the shapes differ. BluValueError: no arrays.
    """
    arrays = asarray_operands(*_unstack_if_array(arrays))
    if not arrays:
        raise BluValueError(with_user_line("stack: needs at least one array"))
    shapes = {_aval(a).shape for a in arrays}
    if len(shapes) > 1:
        raise BluShapeError(
            with_user_line(
                "stack: all arrays need the same shape, got "
                + ", ".join(_aval(a).str_short() for a in arrays)
            )
        )
    nd = _aval(arrays[0]).ndim + 1
    axis = canonicalize_axis(axis, nd, "stack")
    return concatenate([expand_dims(a, axis) for a in arrays], axis, dtype)


def hstack(tup: Sequence[Any], dtype: Any = None) -> Any:
    """Join arrays along axis 1 (along axis 0 for 1-D arrays); dtypes promote."""
    arrs = [atleast_1d(a) for a in asarray_operands(*tup)]
    return concatenate(arrs, 0 if ndim(arrs[0]) == 1 else 1, dtype)


def vstack(tup: Sequence[Any], dtype: Any = None) -> Any:
    """Join arrays along axis 0 after making each at least 2-D; dtypes promote."""
    return concatenate([atleast_2d(a) for a in asarray_operands(*tup)], 0, dtype)


def dstack(tup: Sequence[Any], dtype: Any = None) -> Any:
    """Join arrays along axis 2 after making each at least 3-D; dtypes promote."""
    return concatenate([atleast_3d(a) for a in asarray_operands(*tup)], 2, dtype)


def column_stack(tup: Sequence[Any]) -> Any:
    """Join 1-D arrays as the columns of a 2-D array (2-D arrays are joined along
    axis 1); dtypes promote."""
    arrs = [reshape(a, (-1, 1)) if ndim(a) < 2 else a for a in asarray_operands(*tup)]
    return concatenate(arrs, 1)


def _slice_axis(a: Any, start: int, stop: int, axis: int) -> Any:
    s = _aval(a).shape
    starts, limits = [0] * len(s), list(s)
    starts[axis], limits[axis] = start, stop
    return lax.slice(a, starts, limits)


def _split(ary: Any, indices_or_sections: Any, axis: int, even: bool, name: str) -> list:
    ary = asarray_operand(ary)
    s = _aval(ary).shape
    axis = canonicalize_axis(axis, len(s), name)
    n = s[axis]
    if isinstance(indices_or_sections, (int, np.integer)):
        k = int(indices_or_sections)
        if k <= 0:
            raise BluValueError(with_user_line(f"{name}: number of sections must be > 0"))
        if even and n % k:
            raise BluValueError(
                with_user_line(
                    f"{name}: array split does not result in an equal division "
                    f"({n} into {k} sections)"
                )
            )
        q, r = builtins.divmod(n, k)
        sizes = [q + 1] * r + [q] * (k - r)
        bounds = np.cumsum([0] + sizes).tolist()
    else:
        idx = [int(i) for i in concrete_value(indices_or_sections, name).reshape(-1)]
        bounds = [0] + idx + [n]
    out = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        lo = builtins.min(builtins.max(lo + n if lo < 0 else lo, 0), n)
        hi = builtins.min(builtins.max(hi + n if hi < 0 else hi, 0), n)
        out.append(_slice_axis(ary, lo, builtins.max(lo, hi), axis))
    return out


def split(ary: Any, indices_or_sections: Any, axis: int = 0) -> list:
    """Split into equal sections (an int that must divide the axis) or at the given indices.

    Raises:
        BluValueError: the sections do not divide the axis evenly.
    """
    return _split(ary, indices_or_sections, axis, True, "split")


def array_split(ary: Any, indices_or_sections: Any, axis: int = 0) -> list:
    """Like ``split``, but an int number of sections need not divide the axis (the first
    ``n % sections`` pieces get one more element)."""
    return _split(ary, indices_or_sections, axis, False, "array_split")


def hsplit(ary: Any, indices_or_sections: Any) -> list:
    """``split`` along axis 1 (axis 0 for a 1-D array)."""
    return split(ary, indices_or_sections, 1 if ndim(ary) > 1 else 0)


def vsplit(ary: Any, indices_or_sections: Any) -> list:
    """``split`` along axis 0."""
    return split(ary, indices_or_sections, 0)


def dsplit(ary: Any, indices_or_sections: Any) -> list:
    """``split`` along axis 2, the depth (numpy's and JAX's ``dsplit``).

    Raises:
        BluValueError: ``ary`` has fewer than 3 dimensions, or sections that do not divide
        axis 2 (as ``split``).
    """
    ary = asarray_operand(ary)
    if _aval(ary).ndim < 3:
        raise BluValueError(
            with_user_line(
                f"dsplit needs an array of 3 or more dimensions, got {_aval(ary).str_short()}"
            )
        )
    return split(ary, indices_or_sections, 2)


def flip(m: Any, axis: Any = None) -> Any:
    """Reverse the order of elements along ``axis`` (all axes when None)."""
    m = asarray_operand(m)
    return lax.rev(m, canonicalize_axes(axis, _aval(m).ndim, "flip"))


def fliplr(m: Any) -> Any:
    """Reverse the order of elements along axis 1 (left/right)."""
    return flip(m, 1)


def flipud(m: Any) -> Any:
    """Reverse the order of elements along axis 0 (up/down)."""
    return flip(m, 0)


def roll(a: Any, shift: Any, axis: Any = None) -> Any:
    """Rotate elements along ``axis`` by ``shift`` (static or traced); raveled when None.

    ``shift`` and ``axis`` may be sequences; they broadcast against each other and the shifts
    of an axis named more than once add up (numpy's and JAX's rule).

    Raises:
        BluValueError: ``shift`` and ``axis`` of lengths that do not broadcast, a ``shift`` of
            more than one dimension (numpy's ValueError), or an axis out of range.
        BluTypeError: a shift that is not an integer.
    """
    a = asarray_operand(a)
    if axis is None:
        return reshape(roll(ravel(a), shift, 0), _aval(a).shape)
    nd = _aval(a).ndim
    axes = [axis] if isinstance(axis, (int, np.integer)) else list(axis)
    if not isinstance(shift, (tuple, list, int, np.integer)) and get_aval(shift).ndim > 1:
        raise BluValueError(
            with_user_line(
                f"roll: shift must be a scalar or a 1-d sequence, got {get_aval(shift).str_short()}"
            )
        )
    if isinstance(shift, (tuple, list)):
        shifts = list(shift)
    elif not isinstance(shift, (int, np.integer)) and get_aval(shift).ndim == 1:
        shifts = [shift[i] for i in range(get_aval(shift).shape[0])]  # concrete or traced
    else:
        shifts = [shift]
    if len(axes) == 1:
        axes = axes * len(shifts)
    if len(shifts) == 1:
        shifts = shifts * len(axes)
    if len(axes) != len(shifts):
        raise BluValueError(
            with_user_line(f"roll: {len(shifts)} shifts do not broadcast with the axes {axis}")
        )
    total: dict[int, Any] = {}  # the shift of each axis, in the order the axes first appear
    for ax, sh in zip(axes, shifts):
        ax = canonicalize_axis(ax, nd, "roll")
        if ax not in total:
            total[ax] = sh
        elif is_concrete(total[ax]) and is_concrete(sh):
            total[ax] = int(np.asarray(total[ax])) + int(np.asarray(sh))
        else:
            total[ax] = add(total[ax], sh)
    for ax, sh in total.items():
        a = _roll1(a, sh, ax)
    return a


def _roll1(a: Any, shift: Any, axis: int) -> Any:
    n = _aval(a).shape[axis]
    if n == 0:
        return a
    kind = np.dtype(get_aval(shift).dtype).kind if not isinstance(shift, int) else "i"
    if kind not in "iub":
        raise BluTypeError(
            with_user_line(f"roll: shift must be an integer, got {np.asarray(shift).dtype}")
            if is_concrete(shift)
            else with_user_line(
                f"roll: shift must be an integer, got {get_aval(shift).str_short()}"
            )
        )
    if is_concrete(shift):
        k = int(np.asarray(shift)) % n
        if k == 0:
            return a
        return lax.concatenate(
            [_slice_axis(a, n - k, n, axis), _slice_axis(a, 0, n - k, axis)], axis
        )
    # traced shift: read a window of [a, a] starting at n - shift % n
    info = np.iinfo(get_aval(shift).dtype) if kind != "b" else None
    if info is not None and (info.max > 2**31 - 1 or info.min < -(2**31)):
        shift = mod(shift, n)  # in its own dtype: int32 would wrap 2**32 + 1 to 1
    shift = lax.convert_element_type(shift, dtypes.int32)
    start = subtract(n, mod(shift, n))
    doubled = lax.concatenate([a, a], axis)
    starts = [0] * _aval(a).ndim
    starts[axis] = start
    return lax.dynamic_slice(doubled, starts, _aval(a).shape, allow_negative_indices=False)
