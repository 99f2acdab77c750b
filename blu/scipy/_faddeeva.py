"""``wofz``, the Faddeeva function of ``blu.scipy.special`` (``jax.scipy.special``'s), composed
of ``blu.numpy`` operations on complex arrays.

``w(z) = exp(-z^2) erfc(-i z)`` (DLMF 7.2.3). In the upper half-plane Weideman's rational
approximation (J. A. C. Weideman, "Computation of the complex error function", SIAM J. Numer.
Anal. 31 (1994) 1497-1518, eq. (3.11) with N = 32): ``Z = (L + i z) / (L - i z)``,
``w = 2 p(Z) / (L - i z)^2 + 1 / (sqrt(pi) (L - i z))``, ``L = sqrt(N / sqrt 2)``, the
coefficients of ``p`` computed here by his FFT recipe on first use (relative error about
1e-13 against scipy's Faddeeva package); in the lower half-plane the reflection
``w(z) = 2 exp(-z^2) - w(-z)`` (DLMF 7.4.3), overflowing as ``exp(-z^2)`` does; on the real
axis ``exp(-x^2) + 2 i dawsn(x) / sqrt(pi)`` (DLMF 7.5.1), so the tiny real part of a large
real ``x`` keeps its digits. Derivative by ``custom_jvp``: ``w' = -2 z w + 2 i / sqrt(pi)``.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from blu import lax
from blu import numpy as bnp
from blu.scipy._fresnel_dawson import _dawsn
from blu.transforms.custom_jvp import custom_jvp

__all__ = ["wofz"]

_N = 32
_L = math.sqrt(_N / math.sqrt(2.0))


@functools.cache
def _weideman() -> tuple[float, ...]:
    """Weideman's (1994) coefficients ``a_1..a_N`` of ``p``, highest degree first: the FFT of
    ``exp(-t^2) (L^2 + t^2)`` at ``t = L tan(theta / 2)``, ``theta = k pi / 2N``."""
    m = 2 * _N
    k = np.arange(-m + 1, m)
    t = _L * np.tan(k * np.pi / (2 * m))
    f = np.concatenate([[0.0], np.exp(-t * t) * (_L * _L + t * t)])
    a = np.real(np.fft.fft(np.fft.fftshift(f))) / (2 * m)
    return tuple(float(v) for v in a[1 : _N + 1][::-1])


def _upper(z: Any) -> Any:
    re, im = bnp.real(z), bnp.imag(z)
    iz = lax.complex(-im, re)
    d = _L - iz
    big = 1.0 / d
    zz = (_L + iz) * big
    p = bnp.zeros_like(z)
    for a in _weideman():
        p = p * zz + a
    return 2.0 * p * big * big + (1.0 / math.sqrt(math.pi)) * big


def _wofz_value(z: Any) -> Any:
    re, im = bnp.real(z), bnp.imag(z)
    upper = im >= 0
    infinite = bnp.isinf(re) | bnp.isinf(im)
    safe = ~infinite & ~bnp.isnan(re) & ~bnp.isnan(im)
    zu = bnp.where(safe, bnp.where(upper, z, -z), bnp.zeros_like(z))
    wu = _upper(zu)
    # 2 exp(-z^2) - w(-z) by parts: where exp(-z^2) overflows, a complex product would turn
    # inf * 0 into NaN (scipy's is an infinity, or 0 where the angle's cosine or sine is)
    t = -(zu * zu)
    mag, ang = bnp.exp(bnp.real(t)), bnp.imag(t)
    cos, sin = bnp.cos(ang), bnp.sin(ang)
    e_re = bnp.where(cos == 0, 0.0, mag * cos)
    e_im = bnp.where(sin == 0, 0.0, mag * sin)
    lower = lax.complex(2.0 * e_re - bnp.real(wu), 2.0 * e_im - bnp.imag(wu))
    out = bnp.where(upper, wu, lower)
    out = bnp.where(safe, out, bnp.full_like(z, complex(np.nan, np.nan)))
    out = bnp.where(infinite & upper, bnp.zeros_like(z), out)  # (w ~ i / (sqrt(pi) z))
    x = bnp.where(bnp.isinf(re), 0.0, re)
    axis = lax.complex(bnp.exp(-(x * x)), (2.0 / math.sqrt(math.pi)) * _dawsn(x))
    axis = bnp.where(bnp.isinf(re), bnp.zeros_like(z), axis)
    return bnp.where(im == 0, axis, out)


@custom_jvp
def _wofz(z: Any) -> Any:
    return _wofz_value(z)


@_wofz.defjvp
def _wofz_jvp(primals, tangents):
    (z,), (tz,) = primals, tangents
    w = _wofz(z)
    slope = -2.0 * z * w + lax.complex(
        bnp.zeros_like(bnp.real(z)), bnp.full_like(bnp.real(z), 2.0 / math.sqrt(math.pi))
    )
    return w, slope * tz


def wofz(z: Any) -> Any:
    """The Faddeeva function ``w(z) = exp(-z^2) erfc(-i z)`` of a complex ``z``.

    ``z`` is an array of any shape, real or complex: complex128 for float64 or complex128
    input, complex64 for every other (integers, bool, float16, bfloat16, float32, complex64;
    JAX's promotion, where scipy's computes in complex128). The result has its shape and that
    complex dtype. 0 at infinity in the upper half-plane; overflows (``inf``, NaN) as
    ``exp(-z^2)`` does in the lower one; NaN at NaN. Differentiable (holomorphic):
    ``w' = -2 z w + 2 i / sqrt(pi)``. Weideman's (1994) rational approximation (N = 32,
    relative error about 1e-13) with the reflection ``2 exp(-z^2) - w(-z)`` below the real
    axis and ``exp(-x^2) + 2 i dawsn(x) / sqrt(pi)`` on it (DLMF 7.2.3, 7.4.3, 7.5.1).
    """
    z = bnp.asarray(z)
    wide = z.dtype in (np.float64, np.complex128)
    dt = np.dtype(np.complex128 if wide else np.complex64)
    if z.dtype != dt:
        z = z.astype(dt)
    return _wofz(z)
