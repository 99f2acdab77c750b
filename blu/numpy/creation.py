"""Array creation: array/asarray, zeros/ones/full/empty, arange/linspace, eye/tri, *_like,
vander.

As in JAX, Python floats and lists of them become float32 and Python ints int32 (numpy arrays
keep their dtype, float64 included), and constant patterns (``arange``, ``eye``, ``tri``) are
built from ``lax.iota`` so that under ``jit`` they are computed, not stored as constants.
``array`` itself is defined in ``_promote`` (the bottom module: its ``asarray_operand`` makes
arrays of lists with it) and exported from here.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np

from blu import lax
from blu.core import dtypes
from blu.core.array import Array
from blu.core.errors import (
    BluShapeError,
    BluTypeError,
    BluValueError,
    out_of_memory,
    with_user_line,
)
from blu.core.interpreter import Tracer, get_aval
from blu.numpy._promote import (
    _check_fits,
    array,
    asarray_operand,
    asarray_operand_in,
    asarray_operands,
    broadcast_shapes,
    broadcast_to,
    concrete_value,
    is_python_scalar,
)
from blu.numpy.devices import with_device
from blu.numpy.manipulation import concatenate, expand_dims
from blu.numpy.ufuncs import add, multiply, power, subtract, true_divide

# fmt: off
__all__ = [
    "array", "asarray", "zeros", "ones", "full", "empty", "zeros_like", "ones_like",
    "full_like", "empty_like", "arange", "linspace", "logspace", "eye", "identity", "tri",
    "tril", "triu", "meshgrid", "copy", "vander"
]
# fmt: on


@with_device
def asarray(a: Any, dtype: Any = None, order: Any = None, copy: Any = None) -> Any:
    """Like ``array``, without a copy of a blu array unless ``copy=True`` (blu arrays are
    immutable; a copy only matters when the original is donated or deleted)."""
    return array(a, dtype=dtype, order=order, copy=copy is True)


def copy(a: Any) -> Any:
    """A copy of ``a`` (for concrete arrays a new buffer; tracers are returned as they are)."""
    a = asarray(a)
    return a.copy() if isinstance(a, Array) else a


def _shape(shape: Any, name: str) -> tuple[int, ...]:
    """A static shape (an int or a sequence of ints).

    Raises:
        ConcretizationError: a traced dimension. BluTypeError / BluValueError: not ints, or
            negative.
    """
    dims = (shape,) if isinstance(shape, (int, np.integer, Tracer)) else tuple(shape)
    for d in dims:
        if isinstance(d, Tracer):
            concrete_value(d, f"{name} (the shape)")
    try:
        out = tuple(operator.index(d) for d in dims)
    except TypeError as e:
        raise BluTypeError(with_user_line(f"{name}: shape must be ints, got {shape!r}")) from e
    if any(d < 0 for d in out):
        raise BluValueError(with_user_line(f"{name}: negative dimensions in shape {out}"))
    return out


def _default_dtype(dtype: Any, default: np.dtype = dtypes.default_float) -> np.dtype:
    return default if dtype is None else dtypes.canonicalize(dtype)


@with_device
def full(shape: Any, fill_value: Any, dtype: Any = None) -> Any:
    """An array of ``shape`` filled with ``fill_value`` (a scalar, or an array broadcast to
    ``shape``). A Python scalar without ``dtype`` gives the default dtype, weakly typed."""
    shape = _shape(shape, "full")
    if is_python_scalar(fill_value):
        if dtype is None:
            return lax.full(shape, fill_value)
        d = dtypes.canonicalize(dtype)
        _check_fits(fill_value, d)
        return lax.full(shape, fill_value, d)
    fill = asarray(fill_value, dtype)
    return broadcast_to(fill, shape)


@with_device
def zeros(shape: Any, dtype: Any = None) -> Any:
    """An array of zeros (float32 by default)."""
    return lax.full(_shape(shape, "zeros"), 0, _default_dtype(dtype))


@with_device
def ones(shape: Any, dtype: Any = None) -> Any:
    """An array of ones (float32 by default)."""
    return lax.full(_shape(shape, "ones"), 1, _default_dtype(dtype))


@with_device
def empty(shape: Any, dtype: Any = None) -> Any:
    """Like ``zeros`` (blu arrays are never uninitialised)."""
    return zeros(shape, dtype)


@with_device
def full_like(a: Any, fill_value: Any, dtype: Any = None, shape: Any = None) -> Any:
    """An array like ``a`` (its shape and dtype unless given) filled with ``fill_value``.

    The result is weakly typed when ``a`` is and ``dtype`` is None (as in JAX)."""
    aval = get_aval(asarray_operand(a))
    shape = aval.shape if shape is None else _shape(shape, "full_like")
    d = aval.dtype if dtype is None else dtypes.canonicalize(dtype)
    if is_python_scalar(fill_value):
        out = lax.full(shape, fill_value, d)
    else:
        out = broadcast_to(lax.convert_element_type(asarray(fill_value), d), shape)
    if dtype is None and aval.weak_type:
        out = lax.convert_element_type(out, d, weak_type=True)
    return out


@with_device
def zeros_like(a: Any, dtype: Any = None, shape: Any = None) -> Any:
    """An array of zeros with ``a``'s shape and dtype (or ``shape``/``dtype`` when given)."""
    return full_like(a, 0, dtype, shape)


@with_device
def ones_like(a: Any, dtype: Any = None, shape: Any = None) -> Any:
    """An array of ones with ``a``'s shape and dtype (or ``shape``/``dtype`` when given)."""
    return full_like(a, 1, dtype, shape)


@with_device
def empty_like(a: Any, dtype: Any = None, shape: Any = None) -> Any:
    """As ``zeros_like``: blu arrays are never uninitialized, so this one is zero-filled."""
    return full_like(a, 0, dtype, shape)


def _static_scalar(x: Any, name: str) -> Any:
    if x is None:
        return None
    v = concrete_value(x, name)
    if v.ndim != 0:
        raise BluValueError(with_user_line(f"{name}: expected a scalar, got shape {v.shape}"))
    return v.item()


@with_device
def arange(start: Any, stop: Any = None, step: Any = None, dtype: Any = None) -> Any:
    """Evenly spaced values in ``[start, stop)`` (static arguments), like ``np.arange``.

    The dtype is int32 when every argument is an integer and float32 otherwise (unless given).

    Raises:
        ConcretizationError: an argument is traced. BluValueError: ``step`` is 0.
    """
    start = _static_scalar(start, "arange")
    stop, step = _static_scalar(stop, "arange"), _static_scalar(step, "arange")
    if stop is None:
        start, stop = 0, start
    step = 1 if step is None else step
    if step == 0:
        raise BluValueError(with_user_line("arange: step must not be 0"))
    all_int = all(isinstance(v, (int, bool)) for v in (start, stop, step))
    if dtype is None:
        dtype = dtypes.default_int if all_int else dtypes.default_float
    dtype = dtypes.canonicalize(dtype)
    # the length as Python ints (``len(range)`` overflows past 2**63 - 1)
    n = max(-((start - stop) // step), 0) if all_int else max(math.ceil((stop - start) / step), 0)
    if n * dtype.itemsize >= 2**63:
        raise out_of_memory((n,), dtype, "arange")
    if all_int:
        if dtypes.is_int(dtype) or dtypes.is_float(dtype):
            _check_fits(start, dtype)
            _check_fits(start + step * max(n - 1, 0), dtype)
            out = lax.iota(dtype, (n,))
            if step != 1:
                out = lax.mul(out, step)
            return lax.add(out, start) if start else out
    values = start + step * np.arange(n, dtype=np.float64)
    return Array(values.astype(dtype))


@with_device
def linspace(
    start: Any,
    stop: Any,
    num: int = 50,
    endpoint: bool = True,
    retstep: bool = False,
    dtype: Any = None,
    axis: int = 0,
) -> Any:
    """``num`` evenly spaced values from ``start`` to ``stop`` (arrays broadcast; traced and
    differentiable), as ``start * (1 - t) + stop * t``; integer dtypes round down, bool is
    True where the value is nonzero.

    Returns:
        the values, and the step when ``retstep``.
    """
    num = dtypes.index_int(num, "linspace: num")
    if num < 0:
        raise BluValueError(with_user_line(f"linspace: num must be >= 0, got {num}"))
    if dtype is not None and dtypes.is_inexact(dtypes.canonicalize(dtype)):
        # Python scalars go straight into the float dtype (not rounded through float32 first)
        start, stop = (
            v if isinstance(v, (Array, Tracer)) else array(v, dtype) for v in (start, stop)
        )
    start, stop = asarray_operands(start, stop)
    if dtype is None:
        dtype = dtypes.result_type(start, stop, 0.0)
    dtype = dtypes.canonicalize(dtype)
    comp = dtype if dtypes.is_inexact(dtype) else dtypes.default_float
    start = lax.convert_element_type(start, comp)
    stop = lax.convert_element_type(stop, comp)
    bshape = broadcast_shapes(get_aval(start).shape, get_aval(stop).shape)
    start, stop = broadcast_to(start, bshape), broadcast_to(stop, bshape)
    axis = axis + len(bshape) + 1 if axis < 0 else axis
    div = num - 1 if endpoint else num
    out_shape = bshape[:axis] + (num,) + bshape[axis:]
    step = true_divide(subtract(stop, start), div) if div > 0 else full_like(start, np.nan)
    if num == 0:
        out = zeros(out_shape, comp)
    elif num == 1:
        out = expand_dims(start, axis)
    else:
        t = lax.div(lax.iota(dtypes.real_dtype(comp), (div,)), float(div))
        t = lax.broadcast_in_dim(t, bshape[:axis] + (div,) + bshape[axis:], (axis,))
        s, e = expand_dims(start, axis), expand_dims(stop, axis)
        out = add(multiply(s, subtract(1, t)), multiply(e, t))
        if endpoint:
            out = concatenate([out, e], axis=axis)
    if dtypes.is_int(dtype):  # (a bool is any nonzero value, as numpy's astype)
        out = lax.floor(out)
    out = lax.convert_element_type(out, dtype)
    return (out, step) if retstep else out


def logspace(
    start: Any,
    stop: Any,
    num: int = 50,
    endpoint: bool = True,
    base: float = 10.0,
    dtype: Any = None,
    axis: int = 0,
) -> Any:
    """``base ** linspace(start, stop, num)``. With a float64 (complex128) ``dtype``, Python
    scalar bounds are float64's values, as JAX's (which makes them in ``dtype`` first)."""
    if dtype is not None and dtypes.is_inexact(dtypes.canonicalize(dtype)):
        real = dtypes.real_dtype(dtypes.canonicalize(dtype))
        start, stop = (asarray_operand_in(v, real) for v in (start, stop))
    y = linspace(start, stop, num, endpoint, dtype=None, axis=axis)
    out = power(base, y)
    return out if dtype is None else lax.convert_element_type(out, dtype)


def _index_grid(n: int, m: int) -> tuple[Any, Any]:
    return lax.iota(dtypes.int32, (n, m), 0), lax.iota(dtypes.int32, (n, m), 1)


@with_device
def eye(N: int, M: int | None = None, k: int = 0, dtype: Any = None) -> Any:
    """An ``N x M`` array with ones on diagonal ``k`` (float32 by default)."""
    N = dtypes.index_int(N, "eye: N")
    M = N if M is None else dtypes.index_int(M, "eye: M")
    i, j = _index_grid(N, M)
    k = max(-N, min(M, dtypes.index_int(k, "eye: k")))  # a diagonal outside the matrix: all zeros
    return lax.convert_element_type(lax.eq(lax.add(i, k), j), _default_dtype(dtype))


def identity(n: int, dtype: Any = None) -> Any:
    """The ``n x n`` identity matrix."""
    return eye(n, dtype=dtype)


def tri(N: int, M: int | None = None, k: int = 0, dtype: Any = None) -> Any:
    """Ones at and below diagonal ``k`` (``j <= i + k``), zeros above."""
    N = dtypes.index_int(N, "tri: N")
    M = N if M is None else dtypes.index_int(M, "tri: M")
    i, j = _index_grid(N, M)
    k = dtypes.index_int(k, "tri: k")
    return lax.convert_element_type(lax.le(j, lax.add(i, k)), _default_dtype(dtype))


def _tri_select(m: Any, k: int, lower: bool, name: str) -> Any:
    m = asarray_operand(m)
    aval = get_aval(m)
    if aval.ndim < 2:
        raise BluShapeError(
            with_user_line(f"{name}: needs at least 2 dimensions, got {aval.str_short()}")
        )
    n_, m_ = aval.shape[-2:]
    mask = tri(n_, m_, k if lower else k - 1, dtypes.bool_)
    mask = lax.broadcast_in_dim(mask, aval.shape, (aval.ndim - 2, aval.ndim - 1))
    zero = lax.full(aval.shape, 0, aval.dtype)
    return lax.select(mask, m, zero) if lower else lax.select(mask, zero, m)


def tril(m: Any, k: int = 0) -> Any:
    """``m`` with the elements above diagonal ``k`` of its last two axes zeroed."""
    return _tri_select(m, k, True, "tril")


def triu(m: Any, k: int = 0) -> Any:
    """``m`` with the elements below diagonal ``k`` of its last two axes zeroed."""
    return _tri_select(m, k, False, "triu")


def meshgrid(*xi: Any, copy: bool = True, sparse: bool = False, indexing: str = "xy") -> list:
    """Coordinate arrays from 1-D coordinate vectors (``indexing`` 'xy' or 'ij')."""
    if indexing not in ("xy", "ij"):
        raise BluValueError(
            with_user_line(f"meshgrid: indexing must be 'xy' or 'ij', got {indexing!r}")
        )
    xs = [asarray_operand(x) for x in xi]
    for x in xs:
        if get_aval(x).ndim != 1:
            raise BluShapeError(
                with_user_line(f"meshgrid: inputs must be 1-D, got {get_aval(x).str_short()}")
            )
    n = len(xs)
    shape = [get_aval(x).shape[0] for x in xs]
    if indexing == "xy" and n >= 2:
        shape[0], shape[1] = shape[1], shape[0]
    out = []
    for i, x in enumerate(xs):
        ax = i
        if indexing == "xy" and n >= 2 and i < 2:
            ax = 1 - i
        if sparse:
            s = [1] * n
            s[ax] = get_aval(x).shape[0]
            out.append(lax.reshape(x, s))
        else:
            out.append(lax.broadcast_in_dim(x, tuple(shape), (ax,)))
    return out


def vander(x: Any, N: int | None = None, increasing: bool = False) -> Any:
    """The Vandermonde matrix of the 1-d ``x``: column ``j`` is ``x ** (N - 1 - j)`` (``x ** j``
    with ``increasing``), shape ``(len(x), N)``, in ``x``'s dtype (``jax.numpy.vander``).

    ``N`` (default ``len(x)``) is static. Each column is an integer power of ``x``, so it is
    differentiable in ``x``.

    Raises:
        BluShapeError: ``x`` is not 1-d. BluValueError: a negative ``N``.
        BluTypeError: a non-integer ``N``. ConcretizationError: a traced ``N``.
    """
    x = asarray_operand(x)
    aval = get_aval(x)
    if aval.ndim != 1:
        raise BluShapeError(with_user_line(f"vander: x must be 1-d, got shape {aval.shape}"))
    if isinstance(N, Tracer):
        concrete_value(N, "vander (N)")
    try:
        n = aval.shape[0] if N is None else operator.index(N)
    except TypeError:
        raise BluTypeError(with_user_line(f"vander: N must be an int, got {N!r}")) from None
    if n < 0:
        raise BluValueError(with_user_line(f"vander: N must be >= 0, got {n}"))
    if aval.dtype == dtypes.bool_:
        x = lax.convert_element_type(x, dtypes.int32)  # numpy's powers of bools are ints
    powers = range(n) if increasing else range(n - 1, -1, -1)
    cols = [lax.reshape(lax.integer_pow(x, k), (aval.shape[0], 1)) for k in powers]
    if not cols:
        return lax.full((aval.shape[0], 0), 0, get_aval(x).dtype)
    return concatenate(cols, axis=1)
