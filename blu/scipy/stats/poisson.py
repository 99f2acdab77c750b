"""``jax.scipy.stats.poisson``: the Poisson distribution of mean ``mu``; its CDF is the
regularized upper incomplete gamma function (``blu.scipy.special.gammaincc``)."""

from __future__ import annotations

import math
from typing import Any

from blu import numpy as bnp
from blu.scipy import special
from blu.scipy.stats._common import promote

__all__ = ["cdf", "entropy", "logpmf", "pmf"]


def logpmf(k: Any, mu: Any, loc: Any = 0) -> Any:
    """``xlogy(k - loc, mu) - gammaln(k - loc + 1) - mu``; ``-inf`` where ``k - loc`` is
    negative or not an integer."""
    k, mu, loc = promote(k, mu, loc)
    x = k - loc
    out = special.xlogy(x, mu) - special.gammaln(x + 1.0) - mu
    return bnp.where((x < 0) | (bnp.round(k) != k), -bnp.inf, out)


def pmf(k: Any, mu: Any, loc: Any = 0) -> Any:
    """``exp(logpmf(k, mu, loc))``."""
    return bnp.exp(logpmf(k, mu, loc))


def cdf(k: Any, mu: Any, loc: Any = 0) -> Any:
    """``gammaincc(floor(k - loc) + 1, mu)``; 0 where ``k - loc < 0`` (JAX's)."""
    k, mu, loc = promote(k, mu, loc)
    x = k - loc
    p = special.gammaincc(bnp.floor(bnp.where(x < 0, 0.0, x)) + 1.0, mu)
    return bnp.where(x < 0, 0.0, p).astype(p.dtype)


def entropy(mu: Any, loc: Any = 0) -> Any:
    """``-sum_k pmf(k) log pmf(k)``: the sum over ``k < 250`` for ``mu < 100``, the asymptotic
    ``log(2 pi e mu) / 2 - 1/(12 mu) - 1/(24 mu^2) - 19/(360 mu^3)`` above (JAX's series has the
    first two terms); NaN for ``mu < 0``. ``loc`` only broadcasts."""
    mu, loc = promote(mu, loc)
    mu = bnp.broadcast_to(mu, bnp.broadcast_shapes(mu.shape, loc.shape))
    small = mu < 100
    ms = bnp.where(small, mu, 1.0)[..., None]
    k = bnp.arange(250, dtype=mu.dtype)
    total = bnp.sum(special.entr(pmf(k, ms)), axis=-1)
    ml = bnp.where(small, 100.0, mu)
    inv = 1.0 / ml
    series = inv * (1 / 12 + inv * (1 / 24 + inv * 19 / 360))
    big = 0.5 * bnp.log(2 * math.pi * math.e * ml) - series
    out = bnp.where(small, total, big)
    return bnp.where(mu < 0, bnp.nan, out).astype(out.dtype)
