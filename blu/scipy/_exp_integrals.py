"""``erfcx`` and the exponential integrals ``exp1``, ``expi``, ``expn`` of
``blu.scipy.special`` (``jax.scipy.special``'s), composed of ``blu.numpy`` operations, fixed
series and the continued fraction of :mod:`blu.lax.incomplete`.

- ``erfcx(x) = exp(x^2) erfc(x)``: that product below ``x = 2``; above, the continued fraction
  ``1 / sqrt(pi) / (x + (1/2) / (x + 1 / (x + (3/2) / (x + ...))))`` (A&S 7.1.14), fifty terms
  summed from the tail, so it stays finite (``~ 1 / (x sqrt pi)``) where ``erfc`` underflows.
- ``expn(n, x) = integral_1^inf e^(-x t) / t^n dt``: Numerical Recipes' ``expint`` (3rd ed.,
  sec. 6.3; Cephes ``expn.c``): the continued fraction of ``Gamma(1 - n, x)`` above ``x = 1``
  (modified Lentz in a ``while_loop``, :mod:`blu.lax.incomplete`'s), the power series (with
  ``digamma(n)`` for its logarithmic term) below, thirty terms.
- ``exp1 = expn(1, .)``; ``expi(x) = -exp1(-x)`` for ``x < 0``, for ``x > 0`` the series
  ``euler_gamma + log x + sum_k x^k / (k k!)`` (all terms positive) in a ``while_loop`` up to
  ``x = 40`` and the asymptotic series ``e^x / x sum_k k! / x^k`` (forty terms) above (A&S 5.1.10
  and 5.1.51).

Derivatives by ``custom_jvp`` (JAX's): ``erfcx' = 2 x erfcx(x) - 2 / sqrt(pi)`` (through the
operations), ``d expn(n, x) / dx = -expn(n - 1, x)``, ``exp1' = -e^-x / x``,
``expi' = e^x / x``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from blu import lax
from blu import numpy as bnp
from blu.lax.control_flow.loops import while_loop
from blu.lax.incomplete import _gamma_fraction
from blu.transforms.custom_jvp import custom_jvp

__all__ = ["erfcx", "exp1", "expi", "expn"]

_EULER = 0.5772156649015329
_ERFCX_TERMS = 50
_SERIES_TERMS = 30
_EXPI_SPLIT = 40.0
_ASYMPTOTIC_TERMS = 40


def _float(x: Any) -> Any:
    x = bnp.asarray(x)
    return x if bnp.issubdtype(x.dtype, bnp.inexact) else x.astype(np.float32)


def _half_to_f32(x: Any) -> tuple[Any, Any]:
    dt = x.dtype
    return (x.astype(np.float32) if dt in (bnp.float16, bnp.bfloat16) else x), dt


def erfcx(x: Any) -> Any:
    """The scaled complementary error function ``exp(x^2) erfc(x)``, finite for large ``x``
    (``~ 1 / (x sqrt(pi))``); ``inf`` where ``exp(x^2)`` overflows for negative ``x``."""
    x, dt = _half_to_f32(_float(x))
    small = x < 2.0
    xs = bnp.where(small, x, 0.0)  # (each branch at safe operands: no NaN in the other's grad)
    direct = bnp.exp(xs * xs) * lax.erfc(xs)
    xb = bnp.where(small, 2.0, x)
    t = bnp.zeros_like(xb)
    for k in range(_ERFCX_TERMS, 0, -1):
        t = (0.5 * k) / (xb + t)
    fraction = (1.0 / math.sqrt(math.pi)) / (xb + t)
    out = bnp.where(small, direct, fraction)
    return bnp.where(x == bnp.inf, 0.0, out).astype(dt)


def _expn_series(n: Any, x: Any) -> Any:
    """NR's series for ``x <= 1`` (``n >= 1``): ``ans = 1/(n-1)`` (or ``-log x - euler``) plus
    ``sum_i del_i``, ``del_i = -fact / (i - n + 1)``, at ``i = n - 1`` ``fact (-log x +
    digamma(n))``; ``fact = (-x)^i / i!``."""
    nm1 = n - 1.0
    logx = bnp.log(x)
    ans = bnp.where(nm1 == 0, -logx - _EULER, 1.0 / bnp.where(nm1 == 0, 1.0, nm1))
    psi = lax.digamma(n)
    fact = bnp.ones_like(x)
    for i in range(1, _SERIES_TERMS + 1):
        fact = fact * (-x / i)
        at = nm1 == i
        ans = ans + bnp.where(at, fact * (psi - logx), -fact / bnp.where(at, 1.0, i - nm1))
    return ans


def _expn_value(n: Any, x: Any) -> Any:
    ok = (n >= 0) & (x >= 0) & (bnp.floor(n) == n)
    pos = ok & (x > 0) & (n > 0) & (x < bnp.inf)
    frac = pos & (x > 1.0)
    ser = pos & ~frac
    ns, xs = bnp.where(ser, n, 1.0), bnp.where(ser, x, 0.5)
    series = _expn_series(ns, xs)
    nf, xf = bnp.where(frac, n, 1.0), bnp.where(frac, x, 2.0)
    fraction = bnp.exp(-xf) * _gamma_fraction(1.0 - nf, xf, frac)
    out = bnp.where(frac, fraction, series)
    x0 = bnp.where(x > 0, x, 1.0)
    out = bnp.where(n == 0, bnp.exp(-x0) / x0, out)  # E_0 = e^-x / x
    at0 = bnp.where(n <= 1, bnp.inf, 1.0 / bnp.where(n > 1, n - 1.0, 1.0))
    out = bnp.where(x == 0, at0, bnp.where(x == bnp.inf, 0.0, out))
    return bnp.where(ok, out, bnp.nan).astype(x.dtype)


@custom_jvp
def _expn(n: Any, x: Any) -> Any:
    return _expn_value(n, x)


@_expn.defjvp
def _expn_jvp(primals, tangents):
    (n, x), (_, tx) = primals, tangents
    x0 = bnp.where(x > 0, x, 1.0)
    e0 = bnp.exp(-x0) * (1.0 / x0 + 1.0 / (x0 * x0))  # -d/dx E_0
    lower = bnp.where(n >= 1, _expn(bnp.where(n >= 1, n - 1.0, 0.0), x), e0)
    return _expn_value(n, x), -tx * lower


def expn(n: Any, x: Any) -> Any:
    """The generalized exponential integral ``E_n(x) = integral_1^inf e^(-x t) / t^n dt`` for
    integer-valued ``n >= 0`` and ``x >= 0``: NaN elsewhere (also for a non-integer ``n``); at
    ``x = 0`` ``inf`` for ``n <= 1``, ``1 / (n - 1)`` above. Differentiable in ``x``
    (``-E_(n-1)``)."""
    n, x = bnp.broadcast_arrays(bnp.asarray(n), _float(x))
    x, dt = _half_to_f32(x)
    if not bnp.issubdtype(n.dtype, bnp.inexact) or n.dtype != x.dtype:
        n = n.astype(x.dtype)
    return _expn(n, x).astype(dt)


@custom_jvp
def _exp1(x: Any) -> Any:
    return _expn_value(bnp.ones_like(x), x)


@_exp1.defjvp
def _exp1_jvp(primals, tangents):
    (x,), (tx,) = primals, tangents
    return _exp1(x), -tx * bnp.exp(-x) / x


def exp1(x: Any) -> Any:
    """The exponential integral ``E_1(x) = integral_x^inf e^-t / t dt`` (``expn(1, x)``): NaN
    for ``x < 0``, ``inf`` at 0."""
    x, dt = _half_to_f32(_float(x))
    return _exp1(x).astype(dt)


def _expi_positive(x: Any) -> Any:
    small = x <= _EXPI_SPLIT
    xs = bnp.where(small, x, 1.0)
    eps = float(np.finfo(xs.dtype).eps)

    def cond(c):
        k, term, total = c
        return (k < 1000) & bnp.any(small & (bnp.abs(term) > eps * bnp.abs(total)))

    def body(c):
        k, term, total = c  # term = x^k / k!; total adds x^k / (k k!)
        k = k + 1
        term = term * xs / k.astype(xs.dtype)
        return k, term, total + term / k.astype(xs.dtype)

    init = (bnp.asarray(1, np.int32), xs, xs)
    _, _, total = while_loop(cond, body, init)
    series = _EULER + bnp.log(xs) + total
    xb = bnp.where(small, 2 * _EXPI_SPLIT, x)
    s, term = bnp.ones_like(xb), bnp.ones_like(xb)
    for k in range(1, _ASYMPTOTIC_TERMS + 1):
        term = term * (k / xb)
        s = s + term
    asymptotic = bnp.exp(xb - bnp.log(xb)) * s
    return bnp.where(small, series, asymptotic)


def _expi_value(x: Any) -> Any:
    pos = x > 0
    neg = bnp.where(pos, -1.0, x)
    out = bnp.where(pos, _expi_positive(bnp.where(pos, x, 1.0)), -_exp1(-neg))
    out = bnp.where(x == bnp.inf, bnp.inf, out)
    return bnp.where(x == 0, -bnp.inf, out).astype(x.dtype)


@custom_jvp
def _expi(x: Any) -> Any:
    return _expi_value(x)


@_expi.defjvp
def _expi_jvp(primals, tangents):
    (x,), (tx,) = primals, tangents
    return _expi(x), tx * bnp.exp(x) / x


def expi(x: Any) -> Any:
    """The exponential integral ``Ei(x) = -integral_-x^inf e^-t / t dt`` (principal value):
    ``-exp1(-x)`` for ``x < 0``, ``-inf`` at 0, ``inf`` where it overflows."""
    x, dt = _half_to_f32(_float(x))
    return _expi(x).astype(dt)
