"""``jax.scipy.stats.norm``: the normal distribution of mean ``loc`` and deviation ``scale``."""

from __future__ import annotations

import math
from typing import Any

from blu import numpy as bnp
from blu.scipy import special
from blu.scipy.stats._common import promote, standardize

__all__ = ["cdf", "isf", "logcdf", "logpdf", "logsf", "pdf", "ppf", "sf"]

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def logpdf(x: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``-((x - loc) / scale)^2 / 2 - log(scale) - log(2 pi) / 2``."""
    z, scale = standardize(x, loc, scale)
    return -0.5 * z * z - bnp.log(scale) - _LOG_SQRT_2PI


def pdf(x: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``exp(logpdf(x, loc, scale))``."""
    return bnp.exp(logpdf(x, loc, scale))


def cdf(x: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``ndtr((x - loc) / scale)``."""
    z, _ = standardize(x, loc, scale)
    return special.ndtr(z)


def logcdf(x: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``log_ndtr((x - loc) / scale)``, finite far into the lower tail."""
    z, _ = standardize(x, loc, scale)
    return special.log_ndtr(z)


def sf(x: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """The survival function ``1 - cdf``, as ``ndtr(-(x - loc) / scale)``."""
    x, loc, scale = promote(x, loc, scale)
    return special.ndtr((loc - x) / scale)


def logsf(x: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``log(sf)``, as ``log_ndtr(-(x - loc) / scale)``."""
    x, loc, scale = promote(x, loc, scale)
    return special.log_ndtr((loc - x) / scale)


def ppf(q: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """The quantile ``loc + scale * ndtri(q)`` (NaN outside [0, 1])."""
    q, loc, scale = promote(q, loc, scale)
    return special.ndtri(q) * scale + loc


def isf(q: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """The inverse survival function ``loc - scale * ndtri(q)``."""
    q, loc, scale = promote(q, loc, scale)
    return loc - special.ndtri(q) * scale
