"""``jax.scipy.stats.laplace``: the Laplace (double exponential) distribution."""

from __future__ import annotations

import math
from typing import Any

from blu import numpy as bnp
from blu.scipy.stats._common import promote, standardize

__all__ = ["cdf", "logpdf", "pdf"]


def logpdf(x: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``-|x - loc| / scale - log(2 scale)``."""
    x, loc, scale = promote(x, loc, scale)
    return -bnp.abs(x - loc) / scale - bnp.log(scale) - math.log(2.0)


def pdf(x: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``exp(logpdf(x, loc, scale))``."""
    return bnp.exp(logpdf(x, loc, scale))


def cdf(x: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``exp(z) / 2`` below ``loc``, ``1 - exp(-z) / 2`` above, ``z = (x - loc) / scale``."""
    z, _ = standardize(x, loc, scale)
    neg = z <= 0
    lo = 0.5 * bnp.exp(bnp.where(neg, z, 0.0))
    hi = 1.0 - 0.5 * bnp.exp(-bnp.where(neg, 0.0, z))
    return bnp.where(neg, lo, hi)
