"""Shared helpers for defining primitives: standard shape/dtype checks and rules, dtype
predicates, and the wrappers of numpy impls (``quiet``, ``compute_in_f32``).

The bottom of blu.lax: it imports no lax module (the families' order is in
``blu/lax/__init__.py``)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core.aval import ShapedArray
from blu.core.errors import BluShapeError, BluTypeError, BluValueError, with_user_line


def is_python_scalar(x: Any) -> bool:
    return isinstance(x, (bool, int, float, complex)) or (
        isinstance(x, np.generic) and np.ndim(x) == 0
    )


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


def quiet(fn: Callable) -> Callable:
    """Run a numpy impl with floating-point and integer-overflow warnings off: overflow wraps,
    0/0 is NaN, log(0) is -inf, as in XLA, without numpy's RuntimeWarnings."""

    @functools.wraps(fn)
    def impl(*args: Any, **params: Any) -> Any:
        with np.errstate(all="ignore"):
            return fn(*args, **params)

    return impl
