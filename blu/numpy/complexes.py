"""Complex numbers in ``blu.numpy``: ``real``, ``imag``, ``conj``/``conjugate``, ``angle``,
``iscomplex``, ``isreal``, ``iscomplexobj``, ``isrealobj``.

For real inputs ``real`` and ``conj`` return the array and ``imag`` zeros of its dtype (also
where the input is NaN or infinite, as numpy). Derivatives follow JAX's convention for complex
numbers (see ``blu.lax.complex``).
"""

from __future__ import annotations

from typing import Any

from blu import lax
from blu.core import dtypes
from blu.core.interpreter import get_aval
from blu.numpy._promote import asarray_operand, to_inexact
from blu.numpy.logic import equal, not_equal

__all__ = ["real", "imag", "conj", "conjugate", "angle", "iscomplex", "isreal", "iscomplexobj",
           "isrealobj"]  # fmt: skip


def _complex(x: Any) -> bool:
    return dtypes.is_complex(get_aval(x).dtype)


def real(x: Any, /) -> Any:
    """The real part (complex64 -> float32, complex128 -> float64); real ``x`` itself."""
    x = asarray_operand(x)
    return lax.real(x) if _complex(x) else x


def imag(x: Any, /) -> Any:
    """The imaginary part (complex64 -> float32, complex128 -> float64); zeros of ``x``'s dtype
    for real ``x`` (also where ``x`` is NaN or infinite, as numpy)."""
    x = asarray_operand(x)
    return lax.imag(x) if _complex(x) else lax.full_like(x, 0)


def conj(x: Any, /) -> Any:
    """The complex conjugate ``a - bj``; real ``x`` itself."""
    x = asarray_operand(x)
    return lax.conj(x) if _complex(x) else x


conjugate = conj


def angle(z: Any, deg: bool = False) -> Any:
    """The argument ``atan2(imag(z), real(z))`` in radians (degrees with ``deg``), in
    ``[-pi, pi]``; integers and bools become the default float."""
    z = asarray_operand(z)
    if not _complex(z):
        z = to_inexact(z)
        re, im = z, lax.full_like(z, 0)
    else:
        re, im = lax.real(z), lax.imag(z)
    out = lax.atan2(im, re)
    return lax.mul(out, 180.0 / 3.141592653589793) if deg else out


def iscomplex(x: Any) -> Any:
    """bool array: True where the imaginary part is nonzero."""
    return not_equal(imag(x), 0)


def isreal(x: Any) -> Any:
    """bool array: True where the imaginary part is zero."""
    return equal(imag(x), 0)


def iscomplexobj(x: Any) -> bool:
    """Whether ``x`` has a complex dtype (Python complex numbers included)."""
    return dtypes.is_complex(get_aval(x).dtype)


def isrealobj(x: Any) -> bool:
    """Whether ``x`` does not have a complex dtype."""
    return not iscomplexobj(x)
