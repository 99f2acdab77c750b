"""``jax.scipy.stats.t``: Student's t distribution of ``df`` degrees of freedom; its CDF is a
regularized incomplete beta function (``blu.scipy.special.betainc``)."""

from __future__ import annotations

import math
from typing import Any

from blu import numpy as bnp
from blu.scipy import special
from blu.scipy.stats._common import promote, standardize

__all__ = ["cdf", "logpdf", "pdf"]


def logpdf(x: Any, df: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``gammaln((df+1)/2) - gammaln(df/2) - log(df pi scale^2)/2
    - (df+1)/2 log1p(((x - loc) / scale)^2 / df)``."""
    z, df, scale = standardize(x, df, loc, scale)
    half = 0.5 * df
    norm = (0.5 * bnp.log(df * math.pi * scale * scale) + special.gammaln(half)
            - special.gammaln(half + 0.5))  # fmt: skip
    return -(norm + (half + 0.5) * bnp.log1p(z * z / df))


def pdf(x: Any, df: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``exp(logpdf(x, df, loc, scale))``."""
    return bnp.exp(logpdf(x, df, loc, scale))


def cdf(x: Any, df: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``betainc(df/2, 1/2, df / (df + z^2)) / 2`` for ``z = (x - loc) / scale < 0``, one minus
    it above (JAX's)."""
    x, df, loc, scale = promote(x, df, loc, scale)
    z = (x - loc) / scale
    tail = 0.5 * special.betainc(0.5 * df, 0.5, df / (df + z * z))
    return bnp.where(z < 0, tail, 1.0 - tail)
