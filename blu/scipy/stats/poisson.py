"""``jax.scipy.stats.poisson``: the Poisson distribution of mean ``mu``; its CDF is the
regularized upper incomplete gamma function (``blu.scipy.special.gammaincc``)."""

from __future__ import annotations

from typing import Any

from blu import numpy as bnp
from blu.scipy import special
from blu.scipy.stats._common import promote

__all__ = ["cdf", "logpmf", "pmf"]


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
