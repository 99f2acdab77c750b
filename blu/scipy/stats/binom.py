"""``jax.scipy.stats.binom``: successes in ``n`` trials of probability ``p``; its CDF is a
regularized incomplete beta function (``blu.scipy.special.betainc``)."""

from __future__ import annotations

from typing import Any

from blu import numpy as bnp
from blu.scipy import special
from blu.scipy.stats._common import promote

__all__ = ["cdf", "logpmf", "pmf"]


def logpmf(k: Any, n: Any, p: Any, loc: Any = 0) -> Any:
    """``log comb(n, y) + xlogy(y, p) + xlog1py(n - y, -p)`` with ``y = k - loc``; ``-inf``
    for ``y < 0`` or ``y > n``. A non-integer ``y`` is not masked (as JAX's: the gamma-function
    form continues between the integers, where scipy gives ``-inf``)."""
    k, n, p, loc = promote(k, n, p, loc)
    y = k - loc
    comb = special.gammaln(n + 1.0) - special.gammaln(y + 1.0) - special.gammaln(n - y + 1.0)
    out = comb + special.xlogy(y, p) + special.xlog1py(n - y, -p)
    return bnp.where((y < 0) | (y > n), -bnp.inf, out)


def pmf(k: Any, n: Any, p: Any, loc: Any = 0) -> Any:
    """``exp(logpmf(k, n, p, loc))``."""
    return bnp.exp(logpmf(k, n, p, loc))


def cdf(k: Any, n: Any, p: Any, loc: Any = 0) -> Any:
    """``betainc(n - j, j + 1, 1 - p)`` with ``j = floor(k - loc)``: 0 for ``j < 0``, 1 for
    ``j >= n``; NaN where ``p`` is outside [0, 1] or ``n < 0`` (scipy's values)."""
    k, n, p, loc = promote(k, n, p, loc)
    j = bnp.floor(k - loc)
    inside = (j >= 0) & (j < n)
    a = bnp.where(inside, n - j, 1.0)
    b = bnp.where(inside, j + 1.0, 1.0)
    out = special.betainc(a, b, 1.0 - p)
    out = bnp.where(j < 0, 0.0, bnp.where(j >= n, 1.0, out))
    bad = (p < 0) | (p > 1) | (n < 0) | bnp.isnan(p) | bnp.isnan(n) | bnp.isnan(j)
    return bnp.where(bad, bnp.nan, out).astype(out.dtype)
