"""``owens_t``, Owen's T function of ``blu.scipy.special`` (``jax.scipy.special``'s), composed of
``blu.numpy`` operations: Patefield and Tandy's algorithm (M. Patefield, D. Tandy, "Fast and
accurate calculation of Owen's T-function", J. Stat. Softw. 5 (5), 2000), scipy's.

``T(h, a) = 1/(2 pi) integral_0^a exp(-h^2 (1 + x^2) / 2) / (1 + x^2) dx``. ``T`` is even in
``h`` and odd in ``a``; for ``a > 1`` the identity ``T(h, a) = (Q(h) + Q(ah)) / 2 - Q(h) Q(ah)
- T(ah, 1/a)``, ``Q = 1 - Phi`` (their eq. 2; ``1/4 - (Phi(h) - 1/2) (Phi(ah) - 1/2) -
T(ah, 1/a)`` where ``ah <= 0.67``) maps to ``0 <= a <= 1``. There a
table over 15 ``h`` intervals and 8 ``a`` intervals picks one of six methods and its order:
T1 (Owen's series in ``h^2`` and ``a^2``), T2 and T3 (series in ``1/h^2``, T3 with Chebyshev-
economised coefficients), T4 (series in ``a^2``), T5 (13-point Gauss quadrature of the
integral in ``a^2 x``), T6 (near ``a = 1``). Every method runs over every element (at safe
operands where it is not chosen) for its largest order, each term kept only where the element's
order reaches it, and ``where`` selects: the sums are the paper's. Closed forms at ``h = 0``
(``atan(a) / (2 pi)``), ``a = 0``, ``a = 1`` (``Phi(h) (1 - Phi(h)) / 2``), ``|a| = inf``
(``(1 - Phi(|h|)) / 2``) and ``h = inf`` (0).

Derivatives by ``custom_jvp`` (closed forms): ``dT/dh = -exp(-h^2/2) erf(a h / sqrt 2) /
(2 sqrt(2 pi))``, ``dT/da = exp(-(1 + a^2) h^2 / 2) / (2 pi (1 + a^2))``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from blu import lax
from blu import numpy as bnp
from blu.numpy._promote import asarray_operand_in, is_python_scalar
from blu.transforms.custom_jvp import custom_jvp

__all__ = ["owens_t"]

_HRANGE = (0.02, 0.06, 0.09, 0.125, 0.26, 0.4, 0.6, 1.6, 1.7, 2.33, 2.4, 3.36, 3.4, 4.8)
_ARANGE = (0.025, 0.09, 0.15, 0.36, 0.5, 0.9, 0.99999)
# the paper's table: rows over a's 8 intervals, columns over h's 15; entries index _METHOD/_ORDER
_SELECT = np.array([
    0, 0, 1, 12, 12, 12, 12, 12, 12, 12, 12, 15, 15, 15, 8,
    0, 1, 1, 2, 2, 4, 4, 13, 13, 14, 14, 15, 15, 15, 8,
    1, 1, 2, 2, 2, 4, 4, 14, 14, 14, 14, 15, 15, 15, 9,
    1, 1, 2, 4, 4, 4, 4, 6, 6, 15, 15, 15, 15, 15, 9,
    1, 2, 2, 4, 4, 5, 5, 7, 7, 16, 16, 16, 11, 11, 10,
    1, 2, 4, 4, 4, 5, 5, 7, 7, 16, 16, 16, 11, 11, 11,
    1, 2, 3, 3, 5, 5, 7, 7, 16, 16, 16, 16, 16, 11, 11,
    1, 2, 3, 3, 5, 5, 17, 17, 17, 17, 16, 16, 16, 11, 11,
], np.int32)  # fmt: skip
_METHOD = np.array([1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 3, 4, 4, 4, 4, 5, 6], np.int32)
_ORDER = np.array([2, 3, 4, 5, 7, 10, 12, 18, 10, 20, 30, 0, 4, 7, 8, 20, 0, 0], np.int32)
# T3's Chebyshev-economised coefficients
_C3 = (1.0, -1.0, 1.0, -0.9999999999999998, 0.9999999999999839, -0.9999999999993063,
       0.9999999999797337, -0.9999999995749584, 0.9999999933226235, -0.9999999188923242,
       0.9999992195143483, -0.9999939351372067, 0.9999613559769055, -0.9997955636651394,
       0.9990927896296171, -0.9965938374119182, 0.9891001713838613, -0.9700785580406933,
       0.9291143868326319, -0.8542058695956156, 0.737965260330301, -0.585234698828374,
       0.4159977761456763, -0.25882108752419436, 0.13755358251638927, -0.060795276632595575,
       0.021633768329987153, -0.005934056934551867, 0.0011743414818332946,
       -0.0001489155613350369, 9.072354320794358e-06)  # fmt: skip
# T5's 13-point Gauss rule on [0, 1] in x^2 (its weights carry the 1 / (2 pi))
_PTS5 = (0.35082039676451715489e-02, 0.31279042338030753740e-01, 0.85266826283219451090e-01,
         0.16245071730812277011e00, 0.25851196049125434828e00, 0.36807553840697533536e00,
         0.48501092905604697475e00, 0.60277514152618576821e00, 0.71477884217753226516e00,
         0.81475510988760098605e00, 0.89711029755948965867e00, 0.95723808085944261843e00,
         0.99178832974629703586e00)  # fmt: skip
_WTS5 = (0.18831438115323502887e-01, 0.18567086243977649478e-01, 0.18042093461223385584e-01,
         0.17263829606398753364e-01, 0.16243219975989856730e-01, 0.14994592034116704829e-01,
         0.13535474469662088392e-01, 0.11886351605820165233e-01, 0.10070377242777431897e-01,
         0.81130545742299586629e-02, 0.60419009528470238773e-02, 0.38862217010742057883e-02,
         0.16793031084546090448e-02)  # fmt: skip
_TWO_PI = 2.0 * math.pi
_SQRT_2PI = math.sqrt(2.0 * math.pi)
_SQRT1_2 = 1.0 / math.sqrt(2.0)


def _norm1(x: Any) -> Any:
    """``Phi(x) - 1/2``."""
    return 0.5 * lax.erf(x * _SQRT1_2)


def _norm2(x: Any) -> Any:
    """``1 - Phi(x)``."""
    return 0.5 * lax.erfc(x * _SQRT1_2)


def _t1(h: Any, a: Any, m: Any) -> Any:
    hs = -0.5 * h * h
    dhs = bnp.exp(hs)
    aa = a * a
    aj = a / _TWO_PI
    dj = bnp.expm1(hs)
    gj = hs * dhs
    val = bnp.arctan(a) / _TWO_PI
    for j in range(1, int(_ORDER[_METHOD == 1].max()) + 1):
        val = val + bnp.where(j <= m, dj * aj / (2 * j - 1), 0.0)
        aj = aj * aa
        dj = gj - dj
        gj = gj * hs / (j + 1)
    return val


def _t2(h: Any, a: Any, ah: Any, m: Any) -> Any:
    hs = h * h
    naa = -a * a
    y = 1.0 / hs
    vi = a * bnp.exp(-0.5 * ah * ah) / _SQRT_2PI
    z = _norm1(ah) / h
    val = bnp.zeros_like(h)
    for i in range(1, 2 * int(_ORDER[_METHOD == 2].max()) + 2, 2):
        val = val + bnp.where(i <= 2 * m + 1, z, 0.0)
        z = y * (vi - i * z)
        vi = vi * naa
    return val * bnp.exp(-0.5 * hs) / _SQRT_2PI


def _t3(h: Any, a: Any, ah: Any) -> Any:
    aa = a * a
    hh = h * h
    y = 1.0 / hh
    vi = a * bnp.exp(-0.5 * ah * ah) / _SQRT_2PI
    zi = _norm1(ah) / h
    val = bnp.zeros_like(h)
    for i, c in enumerate(_C3):
        val = val + zi * c
        zi = y * ((2 * i + 1) * zi - vi)
        vi = vi * aa
    return val * bnp.exp(-0.5 * hh) / _SQRT_2PI


def _t4(h: Any, a: Any, m: Any) -> Any:
    hh = h * h
    naa = -a * a
    ai = a * bnp.exp(-0.5 * hh * (1.0 - naa)) / _TWO_PI
    yi = bnp.ones_like(h)
    val = bnp.zeros_like(h)
    top = 2 * int(_ORDER[_METHOD == 4].max()) + 1
    for i in range(1, top + 1, 2):
        val = val + bnp.where(i <= 2 * m + 1, ai * yi, 0.0)
        yi = (1.0 - hh * yi) / (i + 2)
        ai = ai * naa
    return val


def _t5(h: Any, a: Any) -> Any:
    aa = a * a
    nhh = -0.5 * h * h
    val = bnp.zeros_like(h)
    for p, w in zip(_PTS5, _WTS5):
        r = 1.0 + aa * p
        val = val + w * bnp.exp(nhh * r) / r
    return a * val


def _t6(h: Any, a: Any) -> Any:
    normh = _norm2(h)
    y = 1.0 - a
    r = bnp.arctan2(y, 1.0 + a)
    rs = bnp.where(r != 0, r, 1.0)
    val = 0.5 * normh * (1.0 - normh)
    return val - bnp.where(r != 0, rs * bnp.exp(-y * h * h / (2.0 * rs)) / _TWO_PI, 0.0)


def _dispatch(h: Any, a: Any, ah: Any) -> Any:
    """``T(h, a)`` for ``0 <= h < inf``, ``0 <= a <= 1`` (``ah = a h``): the paper's choice."""
    ih = sum((h > v).astype(np.int32) for v in _HRANGE)
    ia = sum((a > v).astype(np.int32) for v in _ARANGE)
    code = bnp.take(bnp.asarray(_SELECT), ia * 15 + ih)
    method = bnp.take(bnp.asarray(_METHOD), code)
    m = bnp.take(bnp.asarray(_ORDER), code)
    out = bnp.zeros_like(h)
    for k, fn in ((1, _t1), (2, _t2), (3, _t3), (4, _t4), (5, _t5), (6, _t6)):
        on = method == k
        hk, ak = bnp.where(on, h, 1.0), bnp.where(on, a, 0.5)
        args = {1: (hk, ak, m), 2: (hk, ak, ak * hk, m), 3: (hk, ak, ak * hk), 4: (hk, ak, m)}
        out = bnp.where(on, fn(*args.get(k, (hk, ak))), out)
    out = bnp.where(a == 1.0, 0.5 * _norm2(-h) * _norm2(h), out)
    out = bnp.where(a == 0.0, 0.0, out)
    return bnp.where(h == 0.0, bnp.arctan(a) / _TWO_PI, out)


def _owens_t_value(h: Any, a: Any) -> Any:
    h = bnp.abs(h)
    fa = bnp.abs(a)
    finite = (h < bnp.inf) & (fa < bnp.inf)
    hf = bnp.where(finite, h, 1.0)
    af = bnp.where(finite, fa, 0.5)
    small = af <= 1.0
    ah = af * hf
    inner = _dispatch(
        bnp.where(small, hf, ah), bnp.where(small, af, 1.0 / af), bnp.where(small, ah, hf)
    )
    low = 0.25 - _norm1(hf) * _norm1(ah) - inner
    nh, nah = _norm2(hf), _norm2(ah)
    high = 0.5 * (nh + nah) - nh * nah - inner
    out = bnp.where(small, inner, bnp.where(ah <= 0.67, low, high))
    out = bnp.where(h == bnp.inf, 0.0, out)
    out = bnp.where(fa == bnp.inf, 0.5 * _norm2(h), out)
    out = bnp.where(a < 0, -out, out)
    return bnp.where(bnp.isnan(h) | bnp.isnan(a), bnp.nan, out)


@custom_jvp
def _owens_t(h: Any, a: Any) -> Any:
    return _owens_t_value(h, a)


@_owens_t.defjvp
def _owens_t_jvp(primals, tangents):
    (h, a), (th, ta) = primals, tangents
    hh = h * h
    dh = -bnp.exp(-0.5 * hh) * lax.erf(a * h * _SQRT1_2) / (2.0 * _SQRT_2PI)
    dh = bnp.where(h == 0, 0.0, dh)  # (a = inf: erf(inf * 0))
    aa = a * a
    da = bnp.where(bnp.isinf(a), 0.0, bnp.exp(-0.5 * (1.0 + aa) * hh) / (_TWO_PI * (1.0 + aa)))
    return _owens_t(h, a), dh * th + da * ta


def _floats(*xs: Any) -> list:
    arrs = [bnp.asarray(x) for x in xs]
    if all(bnp.issubdtype(x.dtype, bnp.inexact) for x in arrs):
        dt = bnp.result_type(*arrs)
    else:
        dt = bnp.result_type(*arrs, np.dtype(np.float32))
    arrs = [asarray_operand_in(x, dt) if is_python_scalar(x) else a for x, a in zip(xs, arrs)]
    return [x.astype(dt) for x in bnp.broadcast_arrays(*arrs)]


def owens_t(h: Any, a: Any) -> Any:
    """Owen's T function ``T(h, a) = 1/(2 pi) integral_0^a exp(-h^2 (1 + x^2) / 2) / (1 + x^2) dx``.

    For ``a >= 0`` it is the probability of ``X > h, 0 < Y < a X`` for independent standard
    normal ``X, Y``. ``h`` and ``a`` are real arrays broadcast together, promoted as JAX's
    (integers to float32); the result has the broadcast shape and promoted dtype, computed in
    float64 and rounded to it (in float32 the series' recurrences lose about three digits).
    Even in ``h``, odd in ``a``; ``atan(a) / (2 pi)`` at ``h = 0``, 0 at ``|h| = inf``,
    ``(1 - Phi(|h|)) / 2`` at ``a = +inf``; NaN where either is NaN. Differentiable in both:
    ``dT/dh = -exp(-h^2/2) erf(a h / sqrt 2) / (2 sqrt(2 pi))``,
    ``dT/da = exp(-(1 + a^2) h^2 / 2) / (2 pi (1 + a^2))``. Patefield and Tandy's (2000)
    method table and series, scipy's (JAX's uses their 13-point quadrature T5 alone).

    Raises:
        BluTypeError: ``h`` or ``a`` is complex.
    """
    h, a = _floats(h, a)
    if bnp.issubdtype(h.dtype, bnp.complexfloating):
        from blu.core.errors import BluTypeError, with_user_line

        raise BluTypeError(with_user_line(f"owens_t: h and a must be real, got {h.dtype}"))
    dt = h.dtype
    if dt != np.float64:  # (T2's and T3's recurrences amplify float32's rounding ~1000-fold)
        h, a = h.astype(np.float64), a.astype(np.float64)
    return _owens_t(h, a).astype(dt)
