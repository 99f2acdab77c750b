"""Shared helpers for defining primitives: operand conversion and standard shape/dtype rules."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core.array import Array
from blu.core.aval import ShapedArray
from blu.core.errors import BluShapeError, BluTypeError, with_user_line
from blu.core.interpreter import get_aval
from blu.lax.shapes import broadcast_in_dim


def is_python_scalar(x: Any) -> bool:
    return isinstance(x, (bool, int, float, complex)) or (
        isinstance(x, np.generic) and np.ndim(x) == 0
    )


def as_operands(*args: Any) -> list[Any]:
    """Make the operands of an n-ary lax function agree: Python scalars are weakly typed and
    take the dtype and shape of the first array operand (so ``add(x, 2.0)`` works for any float
    ``x`` and stays weak iff ``x`` is). Arrays are left as they are; abstract eval then checks
    that shapes and dtypes match (lax does not promote).

    ``np.float64`` (which subclasses ``float``) is not taken for a Python scalar, so
    ``eq(np.float64(x), 0)`` (numpy scalars reach rules from jaxpr literals) compares in float64;
    operands that are all Python scalars are promoted together; a float scalar next to an integer
    or bool array, or an int out of the array's range, is an error rather than a silent
    conversion.

    Raises:
        BluTypeError: a float scalar with an integer/bool array, or an int that does not fit.
    """

    def is_scalar(a: Any) -> bool:
        return isinstance(a, (bool, int, float, complex))  # np.float64 included

    ref = next((a for a in args if not is_scalar(a)), None)
    if ref is None:
        ref = next((a for a in args if isinstance(a, np.generic)), None)
    if ref is None:
        dt, shape = dtypes.result_type(*args), ()
    else:
        aval = get_aval(ref)
        dt, shape = aval.dtype, aval.shape
    out = []
    for a in args:
        if a is ref or not is_scalar(a):
            out.append(a)
            continue
        if isinstance(a, complex) and not dtypes.is_complex(dt):
            raise BluTypeError(
                with_user_line(
                    f"the complex scalar {a!r} cannot take the dtype {dtypes.short_name(dt)} of "
                    "the other operand (lax does not promote): convert it explicitly"
                )
            )
        if isinstance(a, float) and not dtypes.is_inexact(dt):
            raise BluTypeError(
                with_user_line(
                    f"the float scalar {a!r} cannot take the dtype {dtypes.short_name(dt)} of "
                    "the other operand (lax does not promote): convert it explicitly"
                )
            )
        try:
            val = np.asarray(a, dt)
        except OverflowError as e:
            raise BluTypeError(with_user_line(f"{a!r} does not fit in {dt}")) from e
        x = Array(val, not isinstance(a, np.generic))  # numpy scalars are strongly typed
        out.append(broadcast_in_dim(x, shape, ()) if shape else x)
    return out


def fmt_avals(avals: Any) -> str:
    return ", ".join(a.str_short() for a in avals)


def check_same_shapes_dtypes(name: str, avals: Any) -> None:
    shapes = {a.shape for a in avals}
    if len(shapes) > 1:
        raise BluShapeError(
            with_user_line(f"{name}: operands must have equal shapes, got {fmt_avals(avals)}")
        )
    dts = {a.dtype for a in avals}
    if len(dts) > 1:
        raise BluTypeError(
            with_user_line(f"{name}: operands must have equal dtypes, got {fmt_avals(avals)}")
        )


def check_dtype(name: str, aval: ShapedArray, pred: Callable[[np.dtype], bool], kind: str) -> None:
    if not pred(aval.dtype):
        raise BluTypeError(
            with_user_line(f"{name} requires {kind} operands, got {aval.str_short()}")
        )


def elementwise_abstract_eval(
    name: str, allowed: Callable[[np.dtype], bool] | None = None, kind: str = "", out_dtype=None
) -> Callable:
    """Abstract eval of an n-ary elementwise primitive: equal shapes and dtypes; the result is
    weakly typed when every operand is."""

    def rule(*avals: ShapedArray, **params: Any) -> ShapedArray:
        check_same_shapes_dtypes(name, avals)
        if allowed is not None:
            check_dtype(name, avals[0], allowed, kind)
        weak = all(a.weak_type for a in avals)
        dt = avals[0].dtype if out_dtype is None else out_dtype
        return ShapedArray(avals[0].shape, dt, weak and out_dtype is None)

    return rule


def is_float(d: np.dtype) -> bool:
    return dtypes.is_float(d)


def is_inexact(d: np.dtype) -> bool:
    return dtypes.is_inexact(d)


def is_int(d: np.dtype) -> bool:
    return dtypes.is_int(d)


def is_int_or_bool(d: np.dtype) -> bool:
    return dtypes.is_int(d) or d == dtypes.bool_


def is_numeric(d: np.dtype) -> bool:
    return d != dtypes.bool_


def any_dtype(d: np.dtype) -> bool:
    return True


def normalize_axis(axis: int, ndim: int, name: str) -> int:
    if not -ndim <= axis < max(ndim, 1):
        from blu.core.errors import BluValueError

        raise BluValueError(with_user_line(f"{name}: axis {axis} out of range for rank {ndim}"))
    return axis % ndim if ndim else 0


def compute_in_f32(fn: Callable) -> Callable:
    """Wrap a numpy impl so float16/bfloat16 inputs are computed in float32 and cast back (numpy
    has few bfloat16 kernels); other dtypes pass through."""

    def impl(*args: np.ndarray, **params: Any) -> np.ndarray:
        dt = args[0].dtype if args else None
        if dt in (dtypes.bfloat16, dtypes.float16):
            out = fn(*[a.astype(np.float32) if a.dtype == dt else a for a in args], **params)
            with np.errstate(over="ignore"):  # float16 overflow rounds to inf, like XLA
                return np.asarray(out).astype(dt)
        return fn(*args, **params)

    return impl
