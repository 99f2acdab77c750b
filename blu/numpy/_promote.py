"""NumPy-style argument handling: making blu arrays (``array``), dtype promotion (JAX lattice),
shape broadcasting, axes.

Every ``blu.numpy`` function that takes arrays starts here: operands become blu arrays (Python
scalars stay *weakly typed*), their dtypes are promoted along JAX's lattice
(``blu.core.dtypes.result_type``) and their shapes are broadcast with numpy's rules. This is the
bottom of ``blu.numpy``: it imports no other ``blu.numpy`` module.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core.array import Array
from blu.core.errors import (
    BluAxisError,
    BluShapeError,
    BluTypeError,
    BluValueError,
    ConcretizationError,
    with_user_line,
)
from blu.core.interpreter import Tracer, get_aval
from blu.lax.elementwise import convert_element_type
from blu.lax.shapes import broadcast_in_dim, concatenate, full, reshape

_SCALAR_TYPES = (bool, int, float, complex)


def is_python_scalar(x: Any) -> bool:
    """A Python bool/int/float (numpy scalars such as np.float64 subclass float but are not:
    they carry a strong dtype)."""
    return isinstance(x, _SCALAR_TYPES) and not isinstance(x, np.generic)


def is_array(x: Any) -> bool:
    """A blu array or tracer (not a numpy array or Python scalar)."""
    return isinstance(x, (Array, Tracer))


def is_concrete(x: Any) -> bool:
    """True unless ``x`` is a tracer (its value is known now)."""
    return not isinstance(x, Tracer)


def concrete_value(x: Any, what: str) -> np.ndarray:
    """The numpy value of a concrete operand.

    Raises:
        ConcretizationError: ``x`` is a tracer; ``what`` says what needed the value.
    """
    if isinstance(x, Tracer):
        raise ConcretizationError(
            with_user_line(
                f"{what} needs a concrete value, got a traced array {x.aval.str_short()}; "
                "pass it as a static argument (jit(..., static_argnums=...)) or use a "
                "static Python value"
            )
        )
    return np.asarray(x)


def _check_fits(value: Any, dtype: np.dtype) -> None:
    if isinstance(value, int) and not isinstance(value, bool) and dtypes.is_int(dtype):
        info = np.iinfo(dtype)
        if not info.min <= value <= info.max:
            raise BluValueError(
                with_user_line(
                    f"Python int {value} does not fit in {dtype} (range [{info.min}, {info.max}])"
                )
            )


def scalar_array(value: Any, dtype: np.dtype, weak: bool) -> Array:
    """A 0-d blu array holding a Python scalar, range-checked for integer dtypes."""
    _check_fits(value, dtype)
    with np.errstate(over="ignore"):  # a Python float beyond float16's range becomes inf
        return Array(np.asarray(value, dtype), weak)


def asarray_operand(x: Any) -> Any:
    """Arrays and tracers pass through; numpy arrays/scalars and Python scalars (and nested
    lists of them) become blu Arrays. Python scalars stay weakly typed.

    Raises:
        BluTypeError: ``x`` is not array-like (a string, None, a dict, ...) or has an
            unsupported dtype (complex, object, ...).
    """
    if isinstance(x, (Array, Tracer)) or getattr(x, "_blu_device_array", False):
        return x  # (a DeviceArray stays on its GPU)
    if isinstance(x, (np.ndarray, np.generic)):
        return Array(np.array(x, dtypes.canonicalize(x.dtype)))  # a copy: arrays are immutable
    if isinstance(x, _SCALAR_TYPES):
        d, weak = dtypes.dtype_and_weak(x)
        return scalar_array(x, d, weak)
    if isinstance(x, (list, tuple)) or hasattr(x, "__array__"):
        return array(x)
    raise BluTypeError(with_user_line(f"expected an array, got {type(x).__name__}: {x!r:.60}"))


def _width(d: np.dtype) -> int:
    """Bytes of precision: a complex dtype's real part."""
    return d.itemsize // 2 if d.kind == "c" else d.itemsize


def asarray_operand_in(x: Any, dtype: Any) -> Any:
    """``asarray_operand(x)``, except that a Python int/float/complex whose default dtype is
    narrower than ``dtype`` (float64, int64, complex128) becomes a weakly typed 0-d array of
    ``dtype`` made from the Python value itself: float64's 0.1, not float32's 0.1 widened
    (JAX's, where the scalar takes the array's dtype). Where ``dtype`` is no wider, the result
    is ``asarray_operand``'s, so float32/bfloat16 programs trace as before.

    ``dtype`` is the dtype ``x`` will be converted or promoted to by the caller.
    """
    if is_python_scalar(x) and not isinstance(x, bool):
        d, weak = dtypes.dtype_and_weak(x)
        dtype = np.dtype(dtype)
        if dtype.kind in "iufc" and np.can_cast(d, dtype, "same_kind"):
            if _width(dtype) > _width(d):
                return scalar_array(x, dtype, weak)
    return asarray_operand(x)


def asarray_operands(*args: Any) -> list[Any]:
    """``asarray_operand`` of each argument, for functions that promote them later: a Python
    scalar among them is made in their promoted dtype where that is wider than its default
    (``asarray_operand_in``: 0.1 beside float64 is float64's 0.1), else as before."""
    if not any(is_python_scalar(a) for a in args):
        return [asarray_operand(a) for a in args]
    raw = [a if is_python_scalar(a) else asarray_operand(a) for a in args]
    dtype = dtypes.result_type(*raw)
    return [asarray_operand_in(a, dtype) for a in raw]


def asarray_operands_keep_kind(*args: Any) -> list[Any]:
    """``asarray_operand`` of each argument, for functions that hand them on unpromoted (such as
    ``vectorize``'s ``pyfunc``): a Python float (complex) among float64 (complex128) operands
    is a weakly typed float64 (complex128) of its own value, as JAX with x64 makes it; a Python
    int stays an int and a Python float stays real. Else as ``asarray_operand``, so float32
    programs trace as before."""
    if not any(type(a) in (float, complex) for a in args):
        return [asarray_operand(a) for a in args]
    raw = [a if is_python_scalar(a) else asarray_operand(a) for a in args]
    wide = dtypes.result_type(*raw)
    out = []
    for a in raw:
        if type(a) in (float, complex) and dtypes.is_inexact(wide):
            a = asarray_operand_in(a, dtypes.real_dtype(wide) if type(a) is float else wide)
        out.append(asarray_operand(a))
    return out


# ---- array: blu arrays from array-likes --------------------------------------------------------


def _leaves(obj: Any) -> list[Any]:
    if isinstance(obj, (list, tuple)):
        out = []
        for o in obj:
            out.extend(_leaves(o))
        return out
    return [obj]


def _check_int_range(value: np.ndarray, dtype: np.dtype) -> None:
    if value.size and value.dtype.kind in "iu" and dtypes.is_int(dtype):
        info = np.iinfo(dtype)
        lo, hi = int(value.min()), int(value.max())
        if lo < info.min or hi > info.max:
            bad = lo if lo < info.min else hi
            raise BluValueError(with_user_line(f"integer {bad} does not fit in {dtype}"))


def _from_sequence(obj: Any, dtype: Any) -> Any:
    leaves = _leaves(obj)
    for leaf in leaves:
        if not isinstance(leaf, (bool, int, float, complex, np.generic, np.ndarray, Array, Tracer)):
            raise BluTypeError(
                with_user_line(
                    f"array: cannot make an array from {type(leaf).__name__} {leaf!r:.40}"
                )
            )
    if dtype is None:
        # lists are never weakly typed (as in JAX); Python scalars in them defer to the others
        typed = [np.asarray(v) if isinstance(v, np.generic) else v for v in leaves]
        dtype = dtypes.result_type(*typed) if leaves else dtypes.default_float
    dtype = dtypes.canonicalize(dtype)
    if any(isinstance(leaf, Tracer) for leaf in leaves):
        return _stack([array(o, dtype, copy=False) for o in obj]) if obj else full((0,), 0, dtype)
    return Array(_stack_concrete(obj, dtype))


def _stack(parts: list[Any]) -> Any:
    """``bnp.stack(parts)`` of arrays of one dtype (the rows of a nested list holding tracers).

    Raises:
        BluShapeError: the shapes differ.
    """
    if len({get_aval(p).shape for p in parts}) > 1:
        raise BluShapeError(
            with_user_line(
                "stack: all arrays need the same shape, got "
                + ", ".join(get_aval(p).str_short() for p in parts)
            )
        )
    return concatenate([reshape(p, (1,) + get_aval(p).shape) for p in parts], 0)


def _stack_concrete(obj: Any, dtype: np.dtype) -> np.ndarray:
    if isinstance(obj, (list, tuple)):
        if not obj:
            return np.zeros((0,), dtype)
        parts = [_stack_concrete(o, dtype) for o in obj]
        if len({p.shape for p in parts}) > 1:
            shapes = ", ".join(str(p.shape) for p in parts)
            raise BluShapeError(with_user_line(f"array: ragged nested sequence (shapes {shapes})"))
        return np.stack(parts)
    value = np.asarray(obj)
    _check_int_range(value, dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        return value.astype(dtype)


def array(object: Any, dtype: Any = None, copy: bool = True, order: Any = None, ndmin: int = 0):
    """Make a blu array from an array, numpy array, Python scalar or nested sequence.

    Python floats/ints become float32/int32 (weakly typed when a bare scalar and ``dtype`` is
    None, as in JAX); numpy arrays keep their dtype (float64 too); nested lists take the
    promoted dtype of their elements, and may hold traced values (they are stacked).

    Args:
        object: the data.
        dtype: the result dtype (anything ``bnp.dtype`` accepts).
        copy: a concrete blu array (host or device) is copied into a new buffer unless
            ``copy`` is False or None (as JAX: the copy outlives the original's donation or
            ``delete()``); other inputs are always copied, tracers never.
        order: only None/'C'/'K'/'A' (memory order is not a blu concept).
        ndmin: at least this many dimensions (size-1 axes prepended).

    Raises:
        BluTypeError: unsupported dtype or not array-like. BluValueError: an integer does not
        fit the dtype. BluShapeError: a ragged nested sequence.
    """
    if order not in (None, "C", "K", "A"):
        raise BluValueError(with_user_line(f"array: only C order is supported, got {order!r}"))
    if dtype is not None:
        dtype = dtypes.canonicalize(dtype)
    if isinstance(object, (Array, Tracer)) or getattr(object, "_blu_device_array", False):
        out = object if dtype is None else convert_element_type(object, dtype)
        if copy and out is object and not isinstance(object, Tracer):
            out = object.copy()  # a new buffer: donating or deleting ``object`` leaves it alone
    elif isinstance(object, (bool, int, float, complex)) and not isinstance(object, np.generic):
        if dtype is None:
            d, weak = dtypes.dtype_and_weak(object)
            out = scalar_array(object, d, weak)
        else:
            out = scalar_array(object, dtype, False)
    elif isinstance(object, (np.ndarray, np.generic)):
        d = dtypes.canonicalize(object.dtype) if dtype is None else dtype
        if object.dtype.kind in "iu":
            _check_int_range(np.asarray(object), d)
        with np.errstate(over="ignore", invalid="ignore"):
            out = Array(np.array(object, d))
    elif isinstance(object, (list, tuple)):
        out = _from_sequence(object, dtype)
    elif hasattr(object, "__array__"):
        return array(np.asarray(object), dtype, ndmin=ndmin)
    else:
        raise BluTypeError(
            with_user_line(
                f"array: cannot make an array from {type(object).__name__} {object!r:.40}"
            )
        )
    nd = get_aval(out).ndim
    if ndmin > nd:
        out = reshape(out, (1,) * (ndmin - nd) + get_aval(out).shape)
    return out


# ---- broadcasting and promotion ----------------------------------------------------------------


def broadcast_shapes(*shapes: Sequence[int]) -> tuple[int, ...]:
    """numpy broadcasting of shapes.

    Raises:
        BluShapeError: the shapes do not broadcast (names all of them).
    """
    shapes = tuple(tuple(int(d) for d in s) for s in shapes)
    nd = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(nd):
        dims = {s[i - nd + len(s)] for s in shapes if i - nd + len(s) >= 0}
        dims.discard(1)
        if len(dims) > 1:
            raise BluShapeError(
                with_user_line(
                    "shapes " + ", ".join(str(tuple(s)) for s in shapes) + " do not broadcast"
                )
            )
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def broadcast_to(x: Any, shape: Sequence[int] | int) -> Any:
    """numpy ``broadcast_to`` (trailing axes aligned; an int ``shape`` is one axis).

    Raises:
        BluShapeError: ``x`` does not broadcast to ``shape``.
    """
    x = asarray_operand(x)
    aval = get_aval(x)
    shape = (int(shape),) if np.ndim(shape) == 0 else tuple(int(d) for d in shape)
    if aval.shape == shape:
        return x
    nd = len(shape)
    if aval.ndim > nd or broadcast_shapes(aval.shape, shape) != shape:
        raise BluShapeError(with_user_line(f"cannot broadcast {aval.str_short()} to {shape}"))
    return broadcast_in_dim(x, shape, tuple(range(nd - aval.ndim, nd)))


def promote_dtypes(*args: Any) -> list[Any]:
    """Cast operands to their common dtype (JAX promotion lattice, weak scalars defer).

    Python scalars become 0-d arrays of the result dtype directly (so ``x_i64 + 2**40``
    works and ``x_i8 + 300`` is an error, as in JAX).
    """
    raw = [a if is_python_scalar(a) else asarray_operand(a) for a in args]
    dtype, weak = dtypes.result_type(*raw, return_weak_type=True)
    out = []
    for a in raw:
        if is_python_scalar(a):
            out.append(scalar_array(a, dtype, weak))
        else:
            out.append(convert_element_type(a, dtype, weak_type=weak))
    return out


def promote_args(*args: Any) -> list[Any]:
    """Promote dtypes, then broadcast shapes: what every NumPy binary function does first."""
    args = promote_dtypes(*args)
    shape = broadcast_shapes(*[get_aval(a).shape for a in args])
    return [broadcast_to(a, shape) for a in args]


def to_inexact(x: Any) -> Any:
    """Integer/bool ``x`` cast to the default float (weak stays weak); floats and complex
    unchanged."""
    aval = get_aval(x)
    if dtypes.is_inexact(aval.dtype):
        return x
    return convert_element_type(x, dtypes.default_float, weak_type=aval.weak_type)


def promote_args_inexact(*args: Any) -> list[Any]:
    """Like ``promote_args`` but integer/bool inputs become the default float (e.g. for sin).

    Python scalars go straight into the float (JAX's ``promote_dtypes_inexact``): ``u8 / -2``
    is -0.5 * u8, not a range error of -2 against uint8.
    """
    raw = [a if is_python_scalar(a) else asarray_operand(a) for a in args]
    dtype, weak = dtypes.result_type(*raw, return_weak_type=True)
    if not dtypes.is_inexact(dtype):
        dtype = dtypes.default_float
    out = [
        scalar_array(a, dtype, weak)
        if is_python_scalar(a)
        else convert_element_type(a, dtype, weak_type=weak)
        for a in raw
    ]
    shape = broadcast_shapes(*[get_aval(a).shape for a in out])
    return [broadcast_to(a, shape) for a in out]


def promote_args_numeric(name: str, *args: Any) -> list[Any]:
    """``promote_args``, rejecting bool results (numpy has no bool subtract/negative/...).

    Raises:
        BluTypeError: the promoted dtype is bool.
    """
    args = promote_args(*args)
    if args and get_aval(args[0]).dtype == dtypes.bool_:
        raise BluTypeError(
            with_user_line(f"{name} is not defined for bool arrays; cast with astype first")
        )
    return args


def check_int_or_bool(name: str, *args: Any) -> None:
    """Raise BluTypeError unless all operands are integer or bool."""
    for a in args:
        aval = get_aval(a)
        if not (dtypes.is_int(aval.dtype) or aval.dtype == dtypes.bool_):
            raise BluTypeError(
                with_user_line(f"{name} needs integer or bool operands, got {aval.str_short()}")
            )


# ---- axes --------------------------------------------------------------------------------------


def canonicalize_axis(axis: Any, ndim: int, name: str = "axis") -> int:
    """A non-negative axis (negative counts from the end).

    Raises:
        BluAxisError: ``axis`` is not in ``[-ndim, ndim)`` (a ValueError and an IndexError).
    """
    a = dtypes.index_int(axis, f"{name}: axis")  # not int(): 1.5 and '1' are no axes
    if not -ndim <= a < ndim:
        raise BluAxisError(with_user_line(f"{name}: axis {a} is out of bounds for rank {ndim}"))
    return a % ndim


def canonicalize_axes(axis: Any, ndim: int, name: str = "axis") -> tuple[int, ...]:
    """``axis`` (None, an int or a sequence of ints) as a tuple of distinct non-negative axes in
    the given order; None means all axes.

    Raises:
        BluValueError: an axis is out of range or repeated.
    """
    if axis is None:
        return tuple(range(ndim))
    if not isinstance(axis, (Sequence, np.ndarray)) or getattr(axis, "ndim", 1) == 0:
        axis = (axis,)  # one axis (an int; anything else fails in canonicalize_axis)
    out = tuple(canonicalize_axis(a, ndim, name) for a in axis)
    if len(set(out)) != len(out):
        raise BluValueError(with_user_line(f"{name}: repeated axis in {tuple(axis)}"))
    return out
