"""``jax.scipy.stats.bernoulli``: one trial of success probability ``p``."""

from __future__ import annotations

from typing import Any

from blu import numpy as bnp
from blu.scipy import special
from blu.scipy.stats._common import promote

__all__ = ["cdf", "logpmf", "pmf", "ppf"]


def logpmf(k: Any, p: Any, loc: Any = 0) -> Any:
    """``xlogy(k - loc, p) + xlog1py(1 - (k - loc), -p)``; ``-inf`` outside [0, 1]."""
    k, p, loc = promote(k, p, loc)
    x = k - loc
    out = special.xlogy(x, p) + special.xlog1py(1.0 - x, -p)
    return bnp.where((x < 0) | (x > 1), -bnp.inf, out)


def pmf(k: Any, p: Any, loc: Any = 0) -> Any:
    """``exp(logpmf(k, p, loc))``."""
    return bnp.exp(logpmf(k, p, loc))


def cdf(k: Any, p: Any) -> Any:
    """0 below 0, ``1 - p`` on [0, 1), 1 from 1; NaN for ``p`` outside [0, 1]."""
    k, p = promote(k, p)
    out = bnp.where(k < 0, 0.0, bnp.where(k < 1, 1.0 - p, 1.0))
    bad = bnp.isnan(k) | bnp.isnan(p) | (p < 0) | (p > 1)
    return bnp.where(bad, bnp.nan, out).astype(k.dtype)


def ppf(q: Any, p: Any) -> Any:
    """0 for ``q <= 1 - p``, else 1; NaN for ``q`` or ``p`` outside [0, 1] (JAX's values: 0 at
    ``q = 0``, where scipy gives -1)."""
    q, p = promote(q, p)
    out = bnp.where(q <= 1.0 - p, 0.0, 1.0)
    bad = bnp.isnan(q) | bnp.isnan(p) | (p < 0) | (p > 1) | (q < 0) | (q > 1)
    return bnp.where(bad, bnp.nan, out).astype(q.dtype)
