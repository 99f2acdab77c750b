"""The Array API standard's names (2024.12) that numpy spells differently, beside numpy's own.

``acos``/``asin``/``atan``/``atan2``/``acosh``/``asinh``/``atanh``, ``pow``, ``bitwise_invert``,
``bitwise_left_shift``/``bitwise_right_shift`` are numpy's functions under the standard's names;
``nextafter``, ``isdtype``, ``diff`` and ``unstack`` are new here. All are
compositions of ``blu.lax`` primitives (differentiable, batchable and jittable) except
``isdtype``, which inspects dtypes only.
(https://data-apis.org/array-api/2024.12/API_specification/)
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from blu import lax
from blu.core import dtypes
from blu.core.errors import BluShapeError, BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.numpy._promote import asarray_operand, asarray_operands, promote_args_inexact
from blu.numpy.logic import invert, left_shift, right_shift
from blu.numpy.manipulation import concatenate
from blu.numpy.transcendental import (
    arccos,
    arccosh,
    arcsin,
    arcsinh,
    arctan,
    arctan2,
    arctanh,
)
from blu.numpy.ufuncs import power, subtract

# fmt: off
__all__ = [
    "acos", "acosh", "asin", "asinh", "atan", "atan2", "atanh", "pow", "bitwise_invert",
    "bitwise_left_shift", "bitwise_right_shift", "nextafter", "isdtype", "diff",
    "unstack", "__array_api_version__",
]
# fmt: on

__array_api_version__ = "2024.12"

acos, acosh, asin, asinh = arccos, arccosh, arcsin, arcsinh
atan, atan2, atanh = arctan, arctan2, arctanh
pow = power  # noqa: A001  (the standard's name)
bitwise_invert = invert
bitwise_left_shift = left_shift
bitwise_right_shift = right_shift

_UINT_OF = {2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}


def nextafter(x1: Any, x2: Any, /) -> Any:
    """The next representable float after ``x1`` in the direction of ``x2`` (C's
    ``nextafter``): NaN if either is NaN, ``x2`` where they are equal, the smallest subnormal
    with ``x2``'s direction where ``x1`` is zero.

    Derivative: 1 with respect to ``x1`` and 0 with respect to ``x2`` (the result differs from
    ``x1`` by one unit in the last place).

    Raises:
        BluTypeError: integer or bool operands promote to float32 like the other float functions.
    """
    x1, x2 = promote_args_inexact(x1, x2)
    aval = get_aval(x1)
    x1_const = lax.stop_gradient(x1)
    out = _nextafter_bits(x1_const, lax.stop_gradient(x2), aval.dtype)
    # the value of ``out`` with the tangent of x1 (the bit step itself is piecewise constant);
    # where x1 is not finite the difference would be NaN, and the value is ``out`` itself
    stepped = lax.add(x1, lax.stop_gradient(lax.sub(out, x1_const)))
    # (and where it is zero, whose sign the sum would lose: nextafter(0.0, -0.0) is -0.0)
    zero = lax.eq(out, lax.full_like(out, 0))
    return lax.select(lax.and_(lax.is_finite(x1_const), lax.not_(zero)), stepped, out)


def _nextafter_bits(x: Any, y: Any, dtype: np.dtype) -> Any:
    udt = _UINT_OF[dtype.itemsize]
    shape = get_aval(x).shape
    bits = lax.bitcast_convert_type(x, udt)
    one = lax.full(shape, 1, udt)
    zero = lax.full(shape, 0, dtype)
    # away from zero (|x| grows) when x and y are on the same side of x and x is not 0
    grow = lax.eq(lax.lt(x, y), lax.gt(x, zero))
    stepped = lax.select(grow, lax.add(bits, one), lax.sub(bits, one))
    out = lax.bitcast_convert_type(stepped, dtype)
    tiny = lax.bitcast_convert_type(one, dtype)  # the smallest subnormal
    from_zero = lax.select(lax.gt(y, zero), tiny, lax.neg(tiny))
    out = lax.select(lax.eq(x, zero), from_zero, out)
    out = lax.select(lax.eq(x, y), y, out)
    nan = lax.full(shape, np.nan, dtype)
    either_nan = lax.or_(lax.ne(x, x), lax.ne(y, y))
    return lax.select(either_nan, nan, out)


_KIND_TEST = {
    "bool": dtypes.is_bool,
    "signed integer": lambda d: dtypes.is_int(d) and not dtypes.is_unsigned(d),
    "unsigned integer": dtypes.is_unsigned,
    "integral": dtypes.is_int,
    "real floating": dtypes.is_float,
    "complex floating": dtypes.is_complex,
    "numeric": lambda d: dtypes.is_int(d) or dtypes.is_inexact(d),
}


def isdtype(dtype: Any, kind: Any) -> bool:
    """Whether ``dtype`` is of ``kind``: a dtype, one of ``'bool'``, ``'signed integer'``,
    ``'unsigned integer'``, ``'integral'``, ``'real floating'``, ``'complex floating'``,
    ``'numeric'``, or a tuple of those (any matches).

    Raises:
        BluTypeError: ``dtype`` is not a dtype (an array is not accepted, as the standard says).
        BluValueError: an unknown kind name.
    """
    if hasattr(dtype, "shape") and not isinstance(dtype, (type, np.dtype)):
        raise BluTypeError(with_user_line("isdtype: expected a dtype, got an array"))
    d = dtypes.canonicalize(getattr(dtype, "dtype", dtype))
    if isinstance(kind, tuple):
        return any(isdtype(d, k) for k in kind)
    if isinstance(kind, str):
        if kind not in _KIND_TEST:
            names = ", ".join(repr(k) for k in _KIND_TEST)
            raise BluValueError(with_user_line(f"isdtype: unknown kind {kind!r} ({names})"))
        return bool(_KIND_TEST[kind](d))
    return d == dtypes.canonicalize(getattr(kind, "dtype", kind))


def diff(x: Any, /, n: int = 1, axis: int = -1, prepend: Any = None, append: Any = None):
    """The ``n``-th forward difference ``x[i+1] - x[i]`` along ``axis`` (bool: ``!=``), after
    concatenating ``prepend``/``append`` there (numpy's and JAX's ``diff``, whose positional
    order ``n, axis`` it takes, and the standard's keywords); ``n == 0`` returns ``x`` itself,
    without ``prepend``/``append``, as numpy does.

    Shapes: ``x.shape`` with ``axis`` shortened by ``n`` (lengthened by the appended parts).

    Raises:
        BluValueError: ``n < 0``. BluShapeError: ``x`` is 0-d.
    """
    n = operator.index(n)
    if n < 0:
        raise BluValueError(with_user_line(f"diff: n must be >= 0, got {n}"))
    x = asarray_operand(x)
    nd = get_aval(x).ndim
    if nd == 0:
        raise BluShapeError(with_user_line("diff: needs at least one dimension, got a 0-d array"))
    ax = _axis(axis, nd, "diff")
    if n == 0:
        return x  # numpy (and JAX) return the input itself, without prepend/append
    parts = []
    # (a Python float prepended to float64 is float64's value)
    for e in asarray_operands(*(e for e in (prepend, x, append) if e is not None)):
        if get_aval(e).ndim == 0:
            shape = list(get_aval(x).shape)
            shape[ax] = 1
            e = lax.broadcast_in_dim(e, tuple(shape), ())
        parts.append(e)
    if len(parts) > 1:
        x = concatenate(parts, axis=ax)
    for _ in range(n):
        length = get_aval(x).shape[ax]
        if length == 0:
            break
        hi = lax.slice_in_dim(x, 1, length, axis=ax)
        lo = lax.slice_in_dim(x, 0, length - 1, axis=ax)
        x = lax.ne(hi, lo) if get_aval(x).dtype == dtypes.bool_ else subtract(hi, lo)
    return x


def unstack(x: Any, /, *, axis: int = 0) -> tuple[Any, ...]:
    """The slices of ``x`` along ``axis``, as a tuple (the inverse of ``stack``).

    Raises:
        BluShapeError: ``x`` is 0-d or ``axis`` is out of range.
    """
    x = asarray_operand(x)
    aval = get_aval(x)
    if aval.ndim == 0:
        raise BluShapeError(with_user_line("unstack: needs at least one dimension, got 0-d"))
    ax = _axis(axis, aval.ndim, "unstack")
    return tuple(lax.index_in_dim(x, i, ax, keepdims=False) for i in range(aval.shape[ax]))


def _axis(axis: int, nd: int, name: str) -> int:
    axis = operator.index(axis)
    if not -nd <= axis < nd:
        raise BluShapeError(
            with_user_line(f"{name}: axis {axis} is out of range for {nd} dimensions")
        )
    return axis % nd
