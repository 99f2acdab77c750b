"""``blu.scipy.special`` (``jax.scipy.special``): special functions on blu arrays, built from
``blu.lax`` primitives so they stage, differentiate and batch.

Integer inputs are computed in float32 (as JAX). Formulas: Abramowitz & Stegun (ch. 6, 7, 26);
``log_ndtr`` uses ``log(erfc(-x / sqrt 2) / 2)`` for ``x > -10`` and the asymptotic series
``-x^2/2 - log(-x) - log(2 pi)/2 + log(1 - 1/x^2 + 3/x^4 - 15/x^6)`` below (A&S 26.2.12), so it
stays finite far into the lower tail. Functions blu lacks (Bessel ``i0e``/``i1e``, incomplete
gamma and beta, ``zeta``, ...) are listed with their reasons in ``docs/coming_from_jax.md``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from blu import lax
from blu import numpy as bnp
from blu.nn.functions import log_softmax, logsumexp, softmax

__all__ = [
    "betaln",
    "digamma",
    "entr",
    "erf",
    "erfc",
    "erfinv",
    "expit",
    "factorial",
    "gamma",
    "gammaln",
    "gammasgn",
    "kl_div",
    "log_ndtr",
    "log_softmax",
    "logit",
    "logsumexp",
    "multigammaln",
    "ndtr",
    "ndtri",
    "poch",
    "polygamma",
    "rel_entr",
    "softmax",
    "xlog1py",
    "xlogy",
]


def _float(x: Any) -> Any:
    x = bnp.asarray(x)
    return x if bnp.issubdtype(x.dtype, bnp.inexact) else x.astype(np.float32)


def _floats(*xs: Any) -> list:
    xs = [bnp.asarray(x) for x in xs]
    dt = (
        bnp.result_type(*xs, np.float32)
        if not all(bnp.issubdtype(x.dtype, bnp.inexact) for x in xs)
        else bnp.result_type(*xs)
    )
    return [x.astype(dt) for x in bnp.broadcast_arrays(*xs)]


def erf(x: Any) -> Any:
    """The error function ``2/sqrt(pi) * integral_0^x exp(-t^2) dt``."""
    return lax.erf(_float(x))


def erfc(x: Any) -> Any:
    """``1 - erf(x)``, accurate for large ``x``."""
    return lax.erfc(_float(x))


def erfinv(x: Any) -> Any:
    """The inverse of ``erf`` on (-1, 1) (±inf at ±1)."""
    return lax.erf_inv(_float(x))


def gammaln(x: Any) -> Any:
    """``log |Gamma(x)|``."""
    return lax.lgamma(_float(x))


def gammasgn(x: Any) -> Any:
    """The sign of ``Gamma(x)``: 1 for ``x > 0``, ``(-1)^ceil(-x)`` for negative non-integers
    (NaN at the poles ``0, -1, -2, ...``)."""
    x = _float(x)
    fl = bnp.floor(x)
    neg = bnp.where(bnp.remainder(fl, 2) == 0, 1.0, -1.0).astype(x.dtype)
    out = bnp.where(x > 0, bnp.ones_like(x), neg)
    return bnp.where((x <= 0) & (fl == x), bnp.nan, out)


def gamma(x: Any) -> Any:
    """The gamma function ``Gamma(x)`` (``gammasgn(x) * exp(gammaln(x))``)."""
    x = _float(x)
    return gammasgn(x) * bnp.exp(lax.lgamma(x))


def betaln(a: Any, b: Any) -> Any:
    """``log |B(a, b)| = gammaln(a) + gammaln(b) - gammaln(a + b)``."""
    a, b = _floats(a, b)
    return lax.lgamma(a) + lax.lgamma(b) - lax.lgamma(a + b)


def digamma(x: Any) -> Any:
    """``d/dx log Gamma(x)``."""
    return lax.digamma(_float(x))


def polygamma(n: Any, x: Any) -> Any:
    """The ``n``-th derivative of ``digamma`` (``n`` a non-negative Python int)."""
    return lax.polygamma(int(n), _float(x))


def factorial(n: Any, exact: bool = False) -> Any:
    """``n!`` as ``Gamma(n + 1)`` (0 for negative ``n``); ``exact=True`` is not available
    (it needs arbitrary-precision integers; use ``math.factorial``).

    Raises:
        ValueError-compatible BluValueError: ``exact=True``.
    """
    if exact:
        from blu.core.errors import BluValueError

        raise BluValueError("factorial(exact=True) is not available: use math.factorial")
    n = _float(n)
    return bnp.where(n < 0, 0.0, bnp.exp(lax.lgamma(n + 1.0))).astype(n.dtype)


def multigammaln(a: Any, d: int) -> Any:
    """The log of the multivariate gamma function of dimension ``d`` (an int):
    ``d(d-1)/4 log(pi) + sum_j gammaln(a - j/2)``."""
    a = _float(a)
    d = int(d)
    out = sum(lax.lgamma(a - 0.5 * j) for j in range(d))
    return out + d * (d - 1) / 4.0 * math.log(math.pi)


def poch(z: Any, m: Any) -> Any:
    """The rising factorial ``Gamma(z + m) / Gamma(z)``."""
    z, m = _floats(z, m)
    return gammasgn(z + m) * gammasgn(z) * bnp.exp(lax.lgamma(z + m) - lax.lgamma(z))


def expit(x: Any) -> Any:
    """The logistic sigmoid ``1 / (1 + exp(-x))``."""
    return lax.logistic(_float(x))


def logit(p: Any) -> Any:
    """``log(p / (1 - p))``."""
    p = _float(p)
    return bnp.log(p) - bnp.log1p(-p)


def xlogy(x: Any, y: Any) -> Any:
    """``x * log(y)``, 0 where ``x == 0``."""
    x, y = _floats(x, y)
    safe = bnp.where(x == 0, bnp.ones_like(y), y)
    return bnp.where(x == 0, bnp.zeros_like(x), x * bnp.log(safe))


def xlog1py(x: Any, y: Any) -> Any:
    """``x * log1p(y)``, 0 where ``x == 0``."""
    x, y = _floats(x, y)
    safe = bnp.where(x == 0, bnp.zeros_like(y), y)
    return bnp.where(x == 0, bnp.zeros_like(x), x * bnp.log1p(safe))


def entr(x: Any) -> Any:
    """``-x log x`` for ``x > 0``, 0 at 0, ``-inf`` for ``x < 0``."""
    x = _float(x)
    return bnp.where(x < 0, -bnp.inf, -xlogy(x, x))


def rel_entr(p: Any, q: Any) -> Any:
    """``p log(p / q)`` for ``p, q > 0``; 0 where ``p == 0, q >= 0``; ``inf`` otherwise."""
    p, q = _floats(p, q)
    both = (p > 0) & (q > 0)
    safe_p = bnp.where(both, p, 1.0)
    safe_q = bnp.where(both, q, 1.0)
    val = safe_p * (bnp.log(safe_p) - bnp.log(safe_q))
    return bnp.where(both, val, bnp.where((p == 0) & (q >= 0), 0.0, bnp.inf)).astype(p.dtype)


def kl_div(p: Any, q: Any) -> Any:
    """``p log(p / q) - p + q`` (``rel_entr(p, q) - p + q``)."""
    p, q = _floats(p, q)
    return bnp.where((p >= 0) & (q >= 0), rel_entr(p, q) - p + q, bnp.inf).astype(p.dtype)


_SQRT1_2 = 1.0 / math.sqrt(2.0)


def ndtr(x: Any) -> Any:
    """The standard normal CDF ``erfc(-x / sqrt 2) / 2``."""
    x = _float(x)
    return 0.5 * lax.erfc(-x * _SQRT1_2)


def ndtri(p: Any) -> Any:
    """The inverse of ``ndtr``: ``sqrt 2 * erfinv(2p - 1)``."""
    p = _float(p)
    return math.sqrt(2.0) * lax.erf_inv(2.0 * p - 1.0)


def log_ndtr(x: Any) -> Any:
    """``log(ndtr(x))``, finite far into the lower tail (asymptotic series below -10)."""
    x = _float(x)
    mid = bnp.log(0.5 * lax.erfc(-bnp.maximum(x, -10.0) * _SQRT1_2))
    t = bnp.minimum(x, -10.0)
    inv2 = 1.0 / (t * t)
    series = 1.0 - inv2 + 3.0 * inv2**2 - 15.0 * inv2**3 + 105.0 * inv2**4
    tail = -0.5 * t * t - bnp.log(-t) - 0.5 * math.log(2 * math.pi) + bnp.log(series)
    return bnp.where(x > -10.0, mid, tail)
