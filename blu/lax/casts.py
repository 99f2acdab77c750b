"""Casts: ``convert_element_type`` (its primitive with all its rules).

Low in blu.lax (above ``_base`` only) because the constants of ``shapes`` (``full``) cast their
fill value; ``elementwise`` re-exports it.
"""

from __future__ import annotations

__all__ = ["convert_element_type"]  # public lax functions; keep in sync

from typing import Any

import numpy as np

from blu.core import dtypes
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


def convert_element_type(x: Any, new_dtype: Any, weak_type: bool = False) -> Any:
    """Cast ``x`` to ``new_dtype``. Float -> int truncates toward zero, saturates out of range
    and maps NaN to 0 (like XLA); int -> narrower int wraps; anything -> bool is ``x != 0``."""
    new_dtype = dtypes.canonicalize(new_dtype)
    aval = get_aval(x)
    if (
        aval.dtype == new_dtype
        and aval.weak_type == weak_type
        and not isinstance(x, (int, float, complex))
    ):
        return x
    return convert_element_type_p.bind(x, new_dtype=new_dtype, weak_type=weak_type)
