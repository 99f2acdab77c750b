"""The exponentially scaled modified Bessel functions of orders 0 and 1, ``bessel_i0e`` and
``bessel_i1e`` (``jax.lax``'s), composed of elementwise operations.

As Cephes' ``i0e`` / ``i1e`` (S. L. Moshier, *Methods and Programs for Mathematical Functions*,
1989), which JAX's follow: a Chebyshev series of ``exp(-x) I(x)`` on ``[0, 8]``, and one of
``sqrt(x) exp(-x) I(x)`` in ``16 / x`` on ``[8, inf)``. Here the series' coefficients are
interpolated once (on first use) from ``scipy.special.i0e`` / ``i1e`` at Chebyshev points
(``numpy.polynomial.chebyshev.chebinterpolate``) and evaluated with Clenshaw's recurrence; the
relative error is below ``1e-13`` in float64. The derivatives are those of the series (close to
the textbook ``i0e' = i1e - sign(x) i0e``, ``i1e' = i0e - i1e (sign(x) + 1/x)``).
"""

from __future__ import annotations

__all__ = ["bessel_i0e", "bessel_i1e"]

import functools
from typing import Any

import numpy as np
import scipy.special
from numpy.polynomial import chebyshev

from blu.core import dtypes
from blu.core.errors import BluTypeError, with_user_line
from blu.core.interpreter import get_aval
from blu.lax.elementwise import abs, add, div, lt, max, min, mul, select, sign, sub
from blu.lax.shapes import full_like
from blu.lax.special import rsqrt

_SPLIT = 8.0  # Cephes' split between the two series
_DEGREE = 30  # the interpolated series' degree: beyond it the coefficients are below 1e-15


@functools.cache
def _series(order: int) -> tuple[np.ndarray, np.ndarray]:
    """Chebyshev coefficients (float64) of the series near zero, in ``t = x / 4 - 1`` for
    ``x`` in ``[0, 8]`` (``i1e`` divided by ``x``: even, smooth), and far from it, in
    ``t = 16 / x - 1`` for ``x`` in ``[8, inf)`` (times ``sqrt(x)``)."""
    f = scipy.special.i0e if order == 0 else scipy.special.i1e

    def near(t: np.ndarray) -> np.ndarray:
        x = 4.0 * (t + 1.0)  # (Chebyshev points of the first kind: never t = -1, x = 0)
        return f(x) if order == 0 else f(x) / x

    def far(t: np.ndarray) -> np.ndarray:
        x = 16.0 / (t + 1.0)
        return f(x) * np.sqrt(x)

    return chebyshev.chebinterpolate(near, _DEGREE), chebyshev.chebinterpolate(far, _DEGREE)


def _clenshaw(coeffs: np.ndarray, t: Any) -> Any:
    """``sum(c_k T_k(t))`` by Clenshaw's recurrence, in ``t``'s dtype."""
    dt = get_aval(t).dtype
    two_t = add(t, t)
    b1 = b2 = full_like(t, 0)
    for c in coeffs[:0:-1]:
        b1, b2 = add(sub(mul(two_t, b1), b2), full_like(t, np.asarray(c, dt))), b1
    return add(sub(mul(t, b1), b2), full_like(t, np.asarray(coeffs[0], dt)))


def _bessel_e(name: str, order: int, x: Any) -> Any:
    aval = get_aval(x)
    if not dtypes.is_float(aval.dtype):
        raise BluTypeError(
            with_user_line(f"{name}: needs a real float operand, got {aval.str_short()}")
        )
    near_c, far_c = _series(order)
    z = abs(x)
    split = full_like(x, _SPLIT)
    # each series evaluated only inside its own range, so the unused one stays finite
    z_near, z_far = min(z, split), max(z, split)
    near = _clenshaw(near_c, sub(div(z_near, full_like(x, 4.0)), full_like(x, 1.0)))
    far = mul(
        _clenshaw(far_c, sub(div(full_like(x, 16.0), z_far), full_like(x, 1.0))), rsqrt(z_far)
    )
    if order == 1:
        near = mul(near, x)  # odd: i1e(x) = x * (an even function)
        far = mul(far, sign(x))
    return select(lt(z, split), near, far)


def bessel_i0e(x: Any) -> Any:
    """``exp(-|x|) I0(x)``, the exponentially scaled modified Bessel function of order 0,
    elementwise (``jax.lax.bessel_i0e``; ``scipy.special.i0e``): even, 1 at 0, ``~ 1 /
    sqrt(2 pi |x|)`` for large ``|x|``, 0 at infinity; NaN propagates.

    Args:
        x: float array (float16, bfloat16, float32, float64).

    Returns:
        An array of ``x``'s shape and dtype.

    Raises:
        BluTypeError: ``x`` is not a real float array.
    """
    return _bessel_e("bessel_i0e", 0, x)


def bessel_i1e(x: Any) -> Any:
    """``exp(-|x|) I1(x)``, the exponentially scaled modified Bessel function of order 1,
    elementwise (``jax.lax.bessel_i1e``; ``scipy.special.i1e``): odd, ``~ x / 2`` near 0,
    ``~ sign(x) / sqrt(2 pi |x|)`` for large ``|x|``; see ``bessel_i0e``."""
    return _bessel_e("bessel_i1e", 1, x)
