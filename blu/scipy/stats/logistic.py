"""``jax.scipy.stats.logistic``: the logistic distribution."""

from __future__ import annotations

from typing import Any

from blu import numpy as bnp
from blu.scipy import special
from blu.scipy.stats._common import promote, standardize

__all__ = ["cdf", "isf", "logpdf", "pdf", "ppf", "sf"]


def logpdf(x: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``-2 logaddexp(z / 2, -z / 2) - log(scale)``, ``z = (x - loc) / scale`` (symmetric,
    finite for large ``|z|``)."""
    x, loc, scale = promote(x, loc, scale)
    half = 0.5 * (x - loc) / scale
    return -2.0 * bnp.logaddexp(half, -half) - bnp.log(scale)


def pdf(x: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``exp(logpdf(x, loc, scale))``."""
    return bnp.exp(logpdf(x, loc, scale))


def cdf(x: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``expit((x - loc) / scale)``."""
    z, _ = standardize(x, loc, scale)
    return special.expit(z)


def sf(x: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``expit(-(x - loc) / scale)``."""
    x, loc, scale = promote(x, loc, scale)
    return special.expit((loc - x) / scale)


def ppf(q: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``loc + scale * logit(q)``."""
    q, loc, scale = promote(q, loc, scale)
    return special.logit(q) * scale + loc


def isf(q: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``loc - scale * logit(q)``."""
    q, loc, scale = promote(q, loc, scale)
    return loc - special.logit(q) * scale
