"""Casts: ``convert_element_type`` (its primitive with all its rules).

Low in blu.lax (above ``_base`` only) because the constants of ``shapes`` (``full``) cast their
fill value; ``elementwise`` re-exports it.
"""

from __future__ import annotations

__all__ = ["convert_element_type"]  # public lax functions; keep in sync

from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core.array import Array
from blu.core.aval import ShapedArray
from blu.core.interpreter import get_aval
from blu.core.primitive import Primitive
from blu.lax._base import quiet
from blu.transforms.ad_util import Zero, tangent_aval
from blu.transforms.batching import defvectorized

# ---- convert_element_type ------------------------------------------------------------------

convert_element_type_p = Primitive("convert_element_type")


@convert_element_type_p.def_impl
@quiet
def _convert_impl(x: np.ndarray, *, new_dtype: np.dtype, weak_type: bool) -> np.ndarray:
    if x.dtype.kind == "c" and new_dtype.kind != "c":
        if new_dtype == dtypes.bool_:
            return x != 0
        x = np.array(x.real)  # complex -> real keeps the real part (as JAX)
    if dtypes.is_float(x.dtype) and dtypes.is_int(new_dtype):
        # float -> int truncates toward zero, NaN gives 0, out of range saturates (like XLA)
        info = np.iinfo(new_dtype)
        y = np.nan_to_num(np.trunc(np.asarray(x, np.float64)), nan=0.0)
        # compare in float64 but write the bounds as exact ints (float(2**64-1) rounds up)
        out = np.clip(y, float(info.min), float(info.max)).astype(new_dtype)
        out = np.where(y >= float(info.max), new_dtype.type(info.max), out)
        return np.where(y <= float(info.min), new_dtype.type(info.min), out).astype(new_dtype)
    return np.asarray(x).astype(new_dtype)


@convert_element_type_p.def_abstract_eval
def _convert_abstract_eval(x: ShapedArray, *, new_dtype: np.dtype, weak_type: bool):
    return ShapedArray(x.shape, new_dtype, weak_type)


@convert_element_type_p.def_jvp
def _convert_jvp(primals, tangents, *, new_dtype, weak_type):
    (x,), (t,) = primals, tangents
    out = convert_element_type_p.bind(x, new_dtype=new_dtype, weak_type=weak_type)
    if not (dtypes.is_inexact(new_dtype) and dtypes.is_inexact(get_aval(x).dtype)):
        return out, Zero(tangent_aval(get_aval(out)))
    return out, convert_element_type_p.bind(t, new_dtype=new_dtype, weak_type=False)


@convert_element_type_p.def_transpose
def _convert_transpose(ct, x, *, new_dtype, weak_type):
    if isinstance(ct, Zero):
        return [None]
    return [convert_element_type_p.bind(ct, new_dtype=x.aval.dtype, weak_type=False)]


defvectorized(convert_element_type_p)


def _width(d: np.dtype) -> int:
    """Bytes of precision: a complex dtype's real part."""
    return d.itemsize // 2 if d.kind == "c" else d.itemsize


def python_scalar_in(x: Any, dtype: np.dtype) -> Any:
    """A Python float/complex cast to a ``dtype`` wider than its default dtype (float64,
    complex128) becomes a weakly typed 0-d array of ``dtype`` made from the Python value itself:
    float64's 0.1, not float32's 0.1 widened (JAX with x64); so does a Python int beyond int32
    cast to a dtype that holds it (``2**40`` to int64 or float64). A Python float cast to int64
    or uint64 becomes a float64 (then truncated as any float64 is: ``16777217.0`` stays odd).
    Anything else (arrays, numpy scalars, bools, ints that int32 holds exactly, a ``dtype`` no
    wider) is returned as it is, so float32 programs trace as before."""
    if type(x) not in (int, float, complex):  # not bool, not np.float64 (strongly typed)
        return x
    d, weak = dtypes.dtype_and_weak(x)
    if type(x) is float and dtype.kind in "iu" and dtype.itemsize == 8:
        return Array(np.asarray(x, dtypes.float64), weak)
    if type(x) is int:
        info = np.iinfo(d)
        if info.min <= x <= info.max:
            return x  # exact in int32 already
        if dtype.kind in "iu":  # int64, uint64, or the int32 path says it does not fit
            fits = np.iinfo(dtype).min <= x <= np.iinfo(dtype).max
            return Array(np.asarray(x, dtype), weak) if fits else x
    if dtype.kind in "iufc" and np.can_cast(d, dtype, "same_kind") and _width(dtype) > _width(d):
        with np.errstate(over="ignore"):
            return Array(np.asarray(x, dtype), weak)
    return x


def convert_element_type(x: Any, new_dtype: Any, weak_type: bool = False) -> Any:
    """Cast ``x`` to ``new_dtype``. Float -> int truncates toward zero, saturates out of range
    and maps NaN to 0 (like XLA); int -> narrower int wraps; anything -> bool is ``x != 0``.
    A Python scalar cast to a wider dtype of its kind takes that dtype's value of it
    (``convert_element_type(0.1, float64)`` is float64's 0.1, as JAX with x64)."""
    new_dtype = dtypes.canonicalize(new_dtype)
    x = python_scalar_in(x, new_dtype)
    aval = get_aval(x)
    if (
        aval.dtype == new_dtype
        and aval.weak_type == weak_type
        and not isinstance(x, (int, float, complex))
    ):
        return x
    return convert_element_type_p.bind(x, new_dtype=new_dtype, weak_type=weak_type)
