"""``sph_harm_y``, the spherical harmonics of ``blu.scipy.special`` (``jax.scipy.special``'s and
``scipy.special``'s), composed of ``blu.numpy`` operations and ``fori_loop``s.

``Y_n^m(theta, phi) = N P_n^m(cos theta) exp(i m phi)``, ``N = sqrt((2n + 1) (n - m)! /
(4 pi (n + m)!))``, the Condon-Shortley phase ``(-1)^m`` in ``P_n^m`` (DLMF 14.30.1, 14.7.10),
``Y_n^(-m) = (-1)^m conj(Y_n^m)`` (DLMF 14.30.6). The normalised functions
``Pbar_n^m = N P_n^m`` come from the standard stable recurrences (e.g. Holmes and
Featherstone, J. Geodesy 76 (2002) 279-299, eqs. 11-13, with ``4 pi`` normalisation):
``Pbar_0^0 = 1 / sqrt(4 pi)``, ``Pbar_m^m = -sqrt((2m + 1) / 2m) sin(theta) Pbar_(m-1)^(m-1)``,
``Pbar_n^m = a_nm (cos(theta) Pbar_(n-1)^m - b_nm Pbar_(n-2)^m)`` with
``a_nm = sqrt((4n^2 - 1) / (n^2 - m^2))``, ``b_nm = sqrt(((n-1)^2 - m^2) / (4(n-1)^2 - 1))``;
each element climbs from its own ``|m|`` to its own ``n``, in two loops of ``n_max`` steps.
``sin(theta)`` enters as ``|sin(theta)|`` (scipy's values outside ``[0, pi]``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from blu import lax
from blu import numpy as bnp
from blu.core.errors import BluError, BluTypeError, BluValueError, with_user_line
from blu.lax.control_flow.loops import fori_loop
from blu.numpy._promote import asarray_operand_in, is_python_scalar

__all__ = ["sph_harm_y"]


def _int_operand(name: str, v: Any) -> Any:
    v = bnp.asarray(v)
    if not (bnp.issubdtype(v.dtype, bnp.integer) or v.dtype == np.bool_):
        raise BluTypeError(
            with_user_line(f"sph_harm_y: {name} must be an integer array, got {v.dtype}")
        )
    return v.astype(np.int32)


def _legendre_bar(n: Any, am: Any, x: Any, s: Any, n_max: int) -> Any:
    """``Pbar_n^am(x)`` (``s = sqrt(1 - x^2)``) for ``0 <= am <= n <= n_max``, elementwise."""
    dt = x.dtype
    amf = am.astype(dt)

    def diagonal(k, carry):  # Pbar_k^k, kept where k == am
        p, out = carry
        kf = k.astype(dt)
        p = -bnp.sqrt((2.0 * kf + 1.0) / (2.0 * kf)) * s * p
        return p, bnp.where(am == k, p, out)

    p00 = bnp.full_like(x, 1.0 / math.sqrt(4.0 * math.pi))
    _, pmm = fori_loop(1, n_max + 1, diagonal, (p00, p00))

    def climb(k, carry):  # degree l = am + k from l - 1 and l - 2, where l <= n
        p2, p1 = carry
        lf = amf + k.astype(dt)
        a = bnp.sqrt((4.0 * lf * lf - 1.0) / ((lf - amf) * (lf + amf)))
        lm = lf - 1.0
        b = bnp.sqrt((lm - amf) * (lm + amf) / (4.0 * lm * lm - 1.0))
        p = a * (x * p1 - b * p2)
        on = am + k <= n
        return bnp.where(on, p1, p2), bnp.where(on, p, p1)

    _, p = fori_loop(1, n_max + 1, climb, (bnp.zeros_like(x), pmm))
    return p


def sph_harm_y(
    n: Any, m: Any, theta: Any, phi: Any, diff_n: int | None = 0, n_max: int | None = None
) -> Any:
    """The spherical harmonic ``Y_n^m(theta, phi)`` of degree ``n`` and order ``m``.

    ``theta`` is the polar (colatitude) angle and ``phi`` the azimuth (scipy's ``sph_harm_y``
    convention). ``n`` and ``m`` are integer arrays, broadcast with the real ``theta`` and
    ``phi`` (scipy's broadcasting; JAX's takes equal-length 1-D arrays, which broadcast the
    same); the result has the broadcast shape, complex64 (complex128 where ``theta`` or
    ``phi`` is float64). 0 where ``n < 0`` or ``|m| > n`` (scipy's values); ``|sin(theta)|``
    enters, so ``theta`` outside ``[0, pi]`` gives scipy's values. ``n_max`` (a static int,
    JAX's argument) bounds the recurrences: degrees above it are computed as ``n_max`` (JAX's
    clipping); by default it is ``max(n)``, which needs a concrete ``n``. Differentiable in
    ``theta`` and ``phi`` through the recurrences. Normalised associated Legendre recurrences
    (DLMF 14.30.1; Holmes and Featherstone 2002).

    Raises:
        BluValueError: ``diff_n`` is not 0 or None (the derivatives scipy returns are not
            built, as in JAX), or ``n_max`` is negative.
        BluTypeError: ``n`` or ``m`` is not an integer array, ``theta`` or ``phi`` is complex,
            or ``n_max`` is None while ``n`` is traced.
    """
    if diff_n not in (0, None):
        raise BluValueError(
            with_user_line(f"sph_harm_y: diff_n={diff_n!r} is not built (only 0, as JAX's)")
        )
    n, m = _int_operand("n", n), _int_operand("m", m)
    angles = [bnp.asarray(theta), bnp.asarray(phi)]
    for name, v in zip(("theta", "phi"), angles):
        if bnp.issubdtype(v.dtype, bnp.complexfloating):
            raise BluTypeError(with_user_line(f"sph_harm_y: {name} must be real, got {v.dtype}"))
    wide = np.float64 in [v.dtype for v, a in zip(angles, (theta, phi)) if not is_python_scalar(a)]
    dt = np.dtype(np.float64 if wide else np.float32)
    # (a Python float beside float64 is float64's value, not float32's widened)
    theta, phi = (asarray_operand_in(a, dt) if is_python_scalar(a) else v
                  for v, a in zip(angles, (theta, phi)))  # fmt: skip
    if n_max is None:
        try:
            top = np.asarray(n)
        except BluError:
            raise BluTypeError(
                with_user_line("sph_harm_y: pass n_max (a static int) when n is traced")
            ) from None
        n_max = int(top.max()) if top.size else 0
    n_max = int(n_max)
    if n_max < 0:
        raise BluValueError(with_user_line(f"sph_harm_y: n_max must be >= 0, got {n_max}"))
    n, m, theta, phi = bnp.broadcast_arrays(n, m, theta.astype(dt), phi.astype(dt))
    n = bnp.minimum(n, n_max)
    am = bnp.abs(m)
    ok = (n >= 0) & (am <= n)
    x = bnp.cos(theta)
    s = bnp.abs(bnp.sin(theta))
    p = _legendre_bar(bnp.where(ok, n, 0), bnp.where(ok, am, 0), x, s, n_max)
    odd = bnp.remainder(am, 2) == 1
    p = bnp.where((m < 0) & odd, -p, p)  # Y_n^-m = (-1)^m conj(Y_n^m)
    p = bnp.where(ok, p, 0.0)
    angle = m.astype(dt) * phi
    return lax.complex(p * bnp.cos(angle), p * bnp.sin(angle))
