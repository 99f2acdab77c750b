"""``jax.scipy.stats.cauchy``: the Cauchy distribution."""

from __future__ import annotations

import math
from typing import Any

from blu import numpy as bnp
from blu.scipy.stats._common import promote, standardize

__all__ = ["cdf", "isf", "logcdf", "logpdf", "logsf", "pdf", "ppf", "sf"]


def logpdf(x: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``-log(pi) - log(scale) - log1p(((x - loc) / scale)^2)``."""
    z, scale = standardize(x, loc, scale)
    return -math.log(math.pi) - bnp.log(scale) - bnp.log1p(z * z)


def pdf(x: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``exp(logpdf(x, loc, scale))``."""
    return bnp.exp(logpdf(x, loc, scale))


def cdf(x: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``1/2 + arctan((x - loc) / scale) / pi``."""
    x, loc, scale = promote(x, loc, scale)
    return 0.5 + bnp.arctan2(x - loc, scale) / math.pi


def logcdf(x: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``log(cdf(x, loc, scale))``."""
    return bnp.log(cdf(x, loc, scale))


def sf(x: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``cdf`` mirrored: ``1/2 - arctan((x - loc) / scale) / pi``."""
    x, loc, scale = promote(x, loc, scale)
    return cdf(loc - x, 0.0, scale)


def logsf(x: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``log(sf(x, loc, scale))``."""
    return bnp.log(sf(x, loc, scale))


def _tail(q: Any) -> Any:
    """``tan(pi (q - 1/2))``, in the tails as ``-1 / tan(pi q)`` below 1/4 and
    ``1 / tan(pi (1 - q))`` above 3/4 (exact arguments, so they keep their digits); infinite at
    0 and 1."""
    low = q < 0.5
    r = bnp.where(low, q, 1.0 - q)
    mid = (q > 0.25) & (q < 0.75)
    r = bnp.where((r == 0) | mid, 0.25, r)
    out = bnp.where(low, -1.0, 1.0) / bnp.tan(math.pi * r)
    out = bnp.where(mid, bnp.tan(math.pi * (bnp.where(mid, q, 0.5) - 0.5)), out)
    return bnp.where(q == 0, -bnp.inf, bnp.where(q == 1, bnp.inf, out))


def ppf(q: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``loc + scale * tan(pi (q - 1/2))``; NaN outside [0, 1] (``-inf``, ``inf`` at 0, 1)."""
    q, loc, scale = promote(q, loc, scale)
    out = loc + scale * _tail(q)
    return bnp.where((q < 0) | (q > 1), bnp.nan, out).astype(q.dtype)


def isf(q: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``loc - scale * tan(pi (q - 1/2))``; NaN outside [0, 1] (``inf``, ``-inf`` at 0, 1)."""
    q, loc, scale = promote(q, loc, scale)
    out = loc - scale * _tail(q)
    return bnp.where((q < 0) | (q > 1), bnp.nan, out).astype(q.dtype)
