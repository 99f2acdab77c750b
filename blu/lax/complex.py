"""Complex-number primitives: ``real``, ``imag``, ``conj`` and ``complex`` (build ``x + iy``).

Derivatives follow JAX's convention: a complex number is a pair of reals, every derivative is
R-linear, and transposes are plain linear transposes (no conjugation). So the transpose of
``real`` is ``ct + 0j``, of ``imag`` is ``0 - i ct``, of ``complex(x, y)`` is
``(real(ct), -imag(ct))``, and ``conj`` transposes to ``conj``. With these, ``grad`` of a real
function ``f`` at ``z = x + iy`` is ``df/dx - i df/dy``, as ``jax.grad`` gives
(https://jax.readthedocs.io/en/latest/notebooks/autodiff_cookbook.html, "Complex numbers and
differentiation").
"""

from __future__ import annotations

__all__ = ["real", "imag", "conj", "complex"]

from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core.aval import ShapedArray
from blu.core.primitive import Primitive
from blu.lax._base import check_dtype, check_same_shapes_dtypes
from blu.lax._operands import as_operands
from blu.lax.elementwise import neg
from blu.lax.shapes import full_like
from blu.transforms.ad_util import Zero, deflinear, is_undefined
from blu.transforms.batching import defbroadcasting, defvectorized


def _is_complex(d: np.dtype) -> bool:
    return dtypes.is_complex(d)


def _part(name: str, impl: Any) -> Primitive:
    """``real`` or ``imag``: complex -> its real dtype."""
    p = Primitive(name)
    p.def_impl(lambda x: np.array(impl(x)))  # a copy: keeps 0-d arrays 0-d

    @p.def_abstract_eval
    def _abstract(x: ShapedArray) -> ShapedArray:
        check_dtype(name, x, _is_complex, "complex")
        return ShapedArray(x.shape, dtypes.real_dtype(x.dtype), x.weak_type)

    defvectorized(p)
    return p


real_p = _part("real", np.real)
imag_p = _part("imag", np.imag)


def _zeros_real(ct: Any) -> Any:
    return full_like(ct, 0)


deflinear(real_p, lambda ct, x: [None if isinstance(ct, Zero) else complex(ct, _zeros_real(ct))])
deflinear(
    imag_p,
    lambda ct, x: [None if isinstance(ct, Zero) else complex(_zeros_real(ct), neg(ct))],
)

conj_p = Primitive("conj")
conj_p.def_impl(np.conj)


@conj_p.def_abstract_eval
def _conj_abstract(x: ShapedArray) -> ShapedArray:
    check_dtype("conj", x, _is_complex, "complex")
    return x


defvectorized(conj_p)
deflinear(conj_p, lambda ct, x: [None if isinstance(ct, Zero) else conj(ct)])

complex_p = Primitive("complex")


@complex_p.def_impl
def _complex_impl(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    out = np.empty(x.shape, dtypes.complex_dtype(x.dtype))
    out.real, out.imag = x, y
    return out


@complex_p.def_abstract_eval
def _complex_abstract(x: ShapedArray, y: ShapedArray) -> ShapedArray:
    check_same_shapes_dtypes("complex", (x, y))
    check_dtype("complex", x, lambda d: d in (dtypes.float32, dtypes.float64), "float32/float64")
    return ShapedArray(x.shape, dtypes.complex_dtype(x.dtype), x.weak_type and y.weak_type)


def _complex_transpose(ct: Any, x: Any, y: Any) -> list:
    if isinstance(ct, Zero):
        return [None, None]
    return [
        real(ct) if is_undefined(x) else None,
        neg(imag(ct)) if is_undefined(y) else None,
    ]


defbroadcasting(complex_p)
deflinear(complex_p, _complex_transpose)


def real(x: Any) -> Any:
    """The real part of a complex array (complex64 -> float32, complex128 -> float64)."""
    return real_p.bind(x)


def imag(x: Any) -> Any:
    """The imaginary part of a complex array (complex64 -> float32, complex128 -> float64)."""
    return imag_p.bind(x)


def conj(x: Any) -> Any:
    """The complex conjugate ``x - iy`` of a complex array."""
    return conj_p.bind(x)


def complex(x: Any, y: Any) -> Any:
    """``x + i y`` from two float32 (-> complex64) or float64 (-> complex128) arrays of one
    shape (a 0-d operand or size-1 dimensions broadcast, as JAX's lax does); Python scalars
    take the other operand's dtype."""
    x, y = as_operands(x, y, broadcast=True)
    return complex_p.bind(x, y)
