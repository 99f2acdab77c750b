"""``jax.scipy.stats.chi2``: the chi-squared distribution of ``df`` degrees of freedom, a gamma
distribution of shape ``df / 2`` and scale ``2``."""

from __future__ import annotations

import math
from typing import Any

from blu import numpy as bnp
from blu.scipy import special
from blu.scipy.stats._common import promote
from blu.scipy.stats.gamma import _log_gammainc

__all__ = ["cdf", "logcdf", "logpdf", "logsf", "pdf", "sf"]


def logpdf(x: Any, df: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``xlogy(df/2 - 1, y) - y/2 - gammaln(df/2) - (df/2) log 2 - log(scale)`` with
    ``y = (x - loc) / scale``; ``-inf`` for ``y < 0``."""
    x, df, loc, scale = promote(x, df, loc, scale)
    y = (x - loc) / scale
    half = 0.5 * df
    out = special.xlogy(half - 1.0, y) - 0.5 * y - special.gammaln(half)
    out = out - half * math.log(2.0) - bnp.log(scale)
    return bnp.where(y < 0, -bnp.inf, out)


def pdf(x: Any, df: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``exp(logpdf(x, df, loc, scale))``."""
    return bnp.exp(logpdf(x, df, loc, scale))


def _half(x: Any, df: Any, loc: Any, scale: Any) -> tuple:
    # df <= 0 is no distribution: NaN (scipy's; gammainc(0, y) is 1, which is gamma's limit)
    x, df, loc, scale = promote(x, df, loc, scale)
    half = bnp.where(df > 0, 0.5 * df, bnp.nan)
    return half, 0.5 * bnp.clip((x - loc) / scale, 0.0, bnp.inf)


def cdf(x: Any, df: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``gammainc(df/2, y/2)`` with ``y = (x - loc) / scale`` clipped to ``[0, inf]``."""
    return special.gammainc(*_half(x, df, loc, scale))


def logcdf(x: Any, df: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``log(cdf(x, df, loc, scale))``, by ``gamma._log_gammainc`` (finite where the CDF
    underflows)."""
    return _log_gammainc(*_half(x, df, loc, scale))


def sf(x: Any, df: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """The survival function ``gammaincc(df/2, y/2)``."""
    return special.gammaincc(*_half(x, df, loc, scale))


def logsf(x: Any, df: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``log(sf(x, df, loc, scale))``."""
    return bnp.log(sf(x, df, loc, scale))
