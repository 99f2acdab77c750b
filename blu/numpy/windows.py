"""Window functions (``bartlett``, ``blackman``, ``hamming``, ``hanning``, ``kaiser``) and the
modified Bessel function ``i0`` (NumPy's, with ``jax.numpy``'s dtypes: the default float).

The windows are built from ``lax.iota``, so under ``jit`` they are computed, not stored."""

from __future__ import annotations

import math
import operator
from typing import Any

from blu import lax
from blu.core import dtypes
from blu.core.errors import BluTypeError, with_user_line
from blu.core.interpreter import Tracer, get_aval
from blu.numpy._promote import asarray_operand, concrete_value, promote_args_inexact
from blu.numpy.transcendental import cos, exp, sqrt
from blu.numpy.ufuncs import absolute, maximum

__all__ = ["bartlett", "blackman", "hamming", "hanning", "i0", "kaiser"]


def _length(M: Any, name: str) -> int:
    if isinstance(M, Tracer):
        concrete_value(M, f"{name} (M)")
    try:
        return operator.index(M)
    except TypeError:
        raise BluTypeError(with_user_line(f"{name}: M must be an int, got {M!r}")) from None


def _n(M: int) -> Any:
    return lax.iota(dtypes.default_float, M)


def _ones(M: int) -> Any:
    return lax.full((max(M, 0),), 1.0, dtypes.default_float)


def _cosine_window(M: Any, name: str, coefs: tuple[float, ...]) -> Any:
    M = _length(M, name)
    if M <= 1:
        return _ones(M)
    x = _n(M) * (2 * math.pi / (M - 1))
    out = coefs[0] + coefs[1] * cos(x)
    for k, c in enumerate(coefs[2:], 2):
        out = out + c * cos(k * x)
    return out


def bartlett(M: int) -> Any:
    """The Bartlett (triangular) window ``1 - |2n - (M - 1)| / (M - 1)`` of length ``M``
    (``numpy.bartlett``; ``M <= 1`` gives ``ones(max(M, 0))``), in the default float.

    Raises:
        BluTypeError: a non-integer ``M``. ConcretizationError: a traced ``M``.
    """
    M = _length(M, "bartlett")
    if M <= 1:
        return _ones(M)
    return 1.0 - absolute(2.0 * _n(M) - (M - 1)) / (M - 1)


def blackman(M: int) -> Any:
    """The Blackman window ``0.42 - 0.5 cos(2 pi n / (M - 1)) + 0.08 cos(4 pi n / (M - 1))``
    (``numpy.blackman``), in the default float. Raises as ``bartlett``."""
    return _cosine_window(M, "blackman", (0.42, -0.5, 0.08))


def hamming(M: int) -> Any:
    """The Hamming window ``0.54 - 0.46 cos(2 pi n / (M - 1))`` (``numpy.hamming``), in the
    default float. Raises as ``bartlett``."""
    return _cosine_window(M, "hamming", (0.54, -0.46))


def hanning(M: int) -> Any:
    """The Hann window ``0.5 - 0.5 cos(2 pi n / (M - 1))`` (``numpy.hanning``), in the
    default float. Raises as ``bartlett``."""
    return _cosine_window(M, "hanning", (0.5, -0.5))


def i0(x: Any) -> Any:
    """The modified Bessel function of the first kind of order 0, ``exp(|x|) * i0e(|x|)``
    (``jax.numpy.i0``: integers and bools become the default float; differentiable, with
    ``i0'(x) = i1(x)``).

    Raises:
        BluTypeError: a complex ``x`` (NumPy's and JAX's ``i0`` are real only).
    """
    (x,) = promote_args_inexact(asarray_operand(x))
    if dtypes.is_complex(get_aval(x).dtype):
        raise BluTypeError(with_user_line(f"i0: x must be real, got dtype {get_aval(x).dtype}"))
    ax = absolute(x)
    return exp(ax) * lax.bessel_i0e(ax)


def kaiser(M: int, beta: Any) -> Any:
    """The Kaiser window ``i0(beta sqrt(1 - ((n - a) / a)^2)) / i0(beta)``, ``a = (M - 1) / 2``
    (``numpy.kaiser``), in the default float; differentiable in ``beta``.

    Raises:
        BluTypeError: a non-integer ``M``. ConcretizationError: a traced ``M``.
    """
    M = _length(M, "kaiser")
    if M <= 1:
        return _ones(M)
    beta = lax.convert_element_type(asarray_operand(beta), dtypes.default_float)
    alpha = 0.5 * (M - 1)
    r = (_n(M) - alpha) / alpha
    arg = maximum(1.0 - r * r, 0.0)  # rounding past 1 at the ends must not go below 0
    return i0(beta * sqrt(arg)) / i0(beta)
