"""``loggamma``, ``bernoulli`` and ``spence`` of ``blu.scipy.special`` (``jax.scipy.special``'s),
composed of ``blu.numpy`` operations.

- ``loggamma(x)``: ``lgamma`` for ``x > 0``, NaN elsewhere (scipy's real branch; real inputs only).
- ``bernoulli(n)``: the numbers ``B_0`` to ``B_n`` of a static ``n`` as a constant: exact fractions
  (Akiyama-Tanigawa) up to ``B_30``, above ``B_2k = (-1)^(k+1) 2 (2k)! zeta(2k) / (2 pi)^(2k)``
  (DLMF 24.8.1 at 0) in float64, ``(2k)! / (2 pi)^(2k)`` as a running product.
- ``spence(x) = integral_1^x log t / (1 - t) dt``: Cephes ``spence.c``'s rational approximation
  in ``w`` (``x - 1``, ``-x`` or ``1/x - 1``) with its reflection ``pi^2/6 - log x log(1 - x)``
  below ``1/2`` and inversion ``-log(x)^2 / 2`` above ``3/2``; its derivative ``log x / (1 - x)``
  by ``custom_jvp``.
"""

from __future__ import annotations

import math
import operator
from fractions import Fraction
from typing import Any

import numpy as np

from blu import lax
from blu import numpy as bnp
from blu.core.errors import BluError, BluTypeError, BluValueError, with_user_line
from blu.transforms.custom_jvp import custom_jvp

__all__ = ["bernoulli", "loggamma", "spence"]

_EXACT_UP_TO = 30
_PI2_6 = math.pi**2 / 6.0

# Cephes spence.c: spence(x) = -w P(w) / Q(w) for w = x - 1 on [1/2, 3/2]
_SPENCE_P = (4.65128586073990045278e-5, 7.31589045238094711071e-3, 1.33847639578309018650e-1,
             8.79691311754530315341e-1, 2.71149851196553469920e0, 4.25697156008121755724e0,
             3.29771340985225106936e0, 1.00000000000000000126e0)  # fmt: skip
_SPENCE_Q = (6.90990488912553276999e-4, 2.54043763932544379113e-2, 2.82974860602568089943e-1,
             1.41172597751831069617e0, 3.63800533345137075418e0, 5.03278880143316990390e0,
             3.54771340985225096217e0, 9.99999999999999998740e-1)  # fmt: skip


def _inexact(name: str, x: Any) -> Any:
    x = bnp.asarray(x)
    if bnp.issubdtype(x.dtype, bnp.complexfloating):
        raise BluTypeError(with_user_line(f"{name}: complex input ({x.dtype}) is not supported"))
    return x if bnp.issubdtype(x.dtype, bnp.inexact) else x.astype(np.float32)


def loggamma(x: Any) -> Any:
    """The principal branch of ``log(Gamma(x))`` for real ``x``: ``gammaln(x)`` for ``x > 0``,
    NaN for ``x <= 0`` (JAX's; scipy's is ``inf`` at 0).

    ``x`` of any shape; integers are computed in float32. Differentiable (``digamma(x)``).

    Raises:
        BluTypeError: ``x`` is complex (JAX takes complex ``x``; blu does not yet).
    """
    x = _inexact("loggamma", x)
    safe = bnp.where(x > 0, x, bnp.ones_like(x))
    return bnp.where(x > 0, lax.lgamma(safe), bnp.nan).astype(x.dtype)


def _bernoulli_exact(n: int) -> list[Fraction]:
    """``B_0`` to ``B_n`` (``B_1 = -1/2``) by the Akiyama-Tanigawa algorithm."""
    a = [Fraction(0)] * (n + 1)
    out = []
    for m in range(n + 1):
        a[m] = Fraction(1, m + 1)
        for j in range(m, 0, -1):
            a[j - 1] = j * (a[j - 1] - a[j])
        out.append(a[0])
    if n >= 1:
        out[1] = -out[1]  # the algorithm gives B_1^+ = 1/2
    return out


def _bernoulli_table(n: int) -> np.ndarray:
    exact = _bernoulli_exact(min(n, _EXACT_UP_TO))
    out = np.zeros(n + 1)
    out[: len(exact)] = [float(v) for v in exact]
    ratio = 2.0 * math.factorial(_EXACT_UP_TO) / (2.0 * math.pi) ** _EXACT_UP_TO
    js = np.arange(2.0, 40.0)
    with np.errstate(over="ignore"):
        for m in range(_EXACT_UP_TO + 2, n + 1, 2):
            ratio *= m * (m - 1) / (2.0 * math.pi) ** 2  # 2 m! / (2 pi)^m
            zeta = 1.0 + float(np.sum(js**-m))
            out[m] = (1.0 if m % 4 == 2 else -1.0) * ratio * zeta
    return out


def bernoulli(n: int) -> Any:
    """The Bernoulli numbers ``B_0`` to ``B_n`` (``B_1 = -1/2``), a float32 array of shape
    ``(n + 1,)`` (JAX's dtype): exact fractions rounded up to ``B_30``, above from ``zeta(2k)``
    (DLMF 24.8.1); ``+-inf`` where they overflow (``n > 250`` in float64, earlier once rounded
    to float32).

    Raises:
        BluTypeError: ``n`` is not a concrete integer.
        BluValueError: ``n`` is negative.
    """
    try:
        n = operator.index(n)
    except (TypeError, BluError):
        raise BluTypeError(
            with_user_line(f"bernoulli: n must be a concrete integer, got {n!r}")
        ) from None
    if n < 0:
        raise BluValueError(with_user_line(f"bernoulli: n must be non-negative, got {n}"))
    with np.errstate(over="ignore"):
        table = _bernoulli_table(n).astype(np.float32)
    return bnp.asarray(table)


def _polyval(c: tuple, w: Any) -> Any:
    out = bnp.full_like(w, c[0])
    for a in c[1:]:
        out = out * w + a
    return out


def _spence_value(x: Any) -> Any:
    ok = (x > 0) & (x < bnp.inf)
    xs = bnp.where(ok, x, 1.0)
    inv = xs > 2.0
    xs = bnp.where(inv, 1.0 / xs, xs)
    upper = xs > 1.5
    lower = xs < 0.5
    w = bnp.where(upper, 1.0 / xs - 1.0, bnp.where(lower, -xs, xs - 1.0))
    y = -w * _polyval(_SPENCE_P, w) / _polyval(_SPENCE_Q, w)
    xl = bnp.where(lower, xs, 0.5)
    y = bnp.where(lower, _PI2_6 - bnp.log(xl) * bnp.log1p(-xl) - y, y)
    lx = bnp.log(xs)
    y = bnp.where(inv | upper, -0.5 * lx * lx - y, y)
    out = bnp.where(x == 0, _PI2_6, bnp.where(x == 1, 0.0, y))
    return bnp.where(~ok & (x != 0), bnp.nan, out).astype(x.dtype)  # x < 0, inf, NaN


@custom_jvp
def _spence(x: Any) -> Any:
    return _spence_value(x)


@_spence.defjvp
def _spence_jvp(primals, tangents):
    (x,), (tx,) = primals, tangents
    one = x == 1
    xs = bnp.where(one, 2.0, x)
    slope = bnp.where(one, -1.0, bnp.log(xs) / (1.0 - xs))  # -1 at x = 1 (the limit)
    return _spence(x), tx * slope.astype(x.dtype)


def spence(x: Any) -> Any:
    """Spence's function (the dilogarithm ``Li_2(1 - x)``), ``integral_1^x log t / (1 - t) dt``,
    for real ``x >= 0`` (scipy's and JAX's): ``pi^2 / 6`` at 0, 0 at 1; NaN for ``x < 0`` and
    at ``inf`` (scipy's and JAX's values).

    ``x`` of any shape, float32 or float64 (JAX's types); the result has ``x``'s dtype. Cephes'
    rational approximation (``spence.c``); differentiable: ``log x / (1 - x)``.

    Raises:
        BluTypeError: ``x`` is not float32 or float64 (JAX's ``TypeError``).
    """
    x = bnp.asarray(x)
    if x.dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise BluTypeError(with_user_line(f"spence: x must be float32 or float64, got {x.dtype}"))
    return _spence(x)
