"""Shared helpers for defining primitives: operand conversion and standard shape/dtype rules."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from blu.core import dtypes
from blu.core.aval import ShapedArray
from blu.core.errors import BluShapeError, BluTypeError, with_user_line
from blu.core.interpreter import get_aval


def is_python_scalar(x: Any) -> bool:
    return isinstance(x, (bool, int, float)) or (isinstance(x, np.generic) and np.ndim(x) == 0)


def as_operands(*args: Any) -> list[Any]:
    """Make lax operands agree: Python scalars take the dtype of the first array operand (they
    are weakly typed) and are broadcast to its shape. Arrays are left as they are; the primitive's
    abstract eval then checks that shapes and dtypes match."""
    from blu.lax.shapes import broadcast_in_dim

    ref = next((a for a in args if not isinstance(a, (bool, int, float))), None)
    if ref is None:
        return list(args)
    aval = get_aval(ref)
    out = []
    for a in args:
        if isinstance(a, (bool, int, float)):
            a = np.asarray(a, aval.dtype)[()]  # a numpy scalar: staged as a literal
            if aval.shape:
                a = broadcast_in_dim(a, aval.shape, ())
        out.append(a)
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
            return np.asarray(out).astype(dt)
        return fn(*args, **params)

    return impl
