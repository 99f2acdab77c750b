"""``jax.scipy.stats.beta``: the beta distribution of shapes ``a``, ``b``; its CDF is the
regularized incomplete beta function (``blu.scipy.special.betainc``)."""

from __future__ import annotations

from typing import Any

from blu import numpy as bnp
from blu.scipy import special
from blu.scipy.stats._common import promote, standardize

__all__ = ["cdf", "logcdf", "logpdf", "logsf", "pdf", "sf"]


def logpdf(x: Any, a: Any, b: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``xlogy(a - 1, y) + xlog1py(b - 1, -y) - betaln(a, b) - log(scale)`` with
    ``y = (x - loc) / scale``; ``-inf`` outside [0, 1], NaN
    where ``y`` is."""
    y, a, b, scale = standardize(x, a, b, loc, scale)
    out = special.xlogy(a - 1.0, y) + special.xlog1py(b - 1.0, -y)
    out = out - special.betaln(a, b) - bnp.log(scale)
    out = bnp.where(bnp.isnan(y), bnp.nan, out)
    return bnp.where((y < 0) | (y > 1), -bnp.inf, out)


def pdf(x: Any, a: Any, b: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``exp(logpdf(x, a, b, loc, scale))``."""
    return bnp.exp(logpdf(x, a, b, loc, scale))


def _y(x: Any, a: Any, b: Any, loc: Any, scale: Any) -> tuple:
    x, a, b, loc, scale = promote(x, a, b, loc, scale)
    return a, b, bnp.clip((x - loc) / scale, 0.0, 1.0)


def cdf(x: Any, a: Any, b: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``betainc(a, b, y)`` with ``y = (x - loc) / scale`` clipped to [0, 1] (JAX's)."""
    a, b, y = _y(x, a, b, loc, scale)
    return special.betainc(a, b, y)


def logcdf(x: Any, a: Any, b: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``log(cdf(x, a, b, loc, scale))``."""
    return bnp.log(cdf(x, a, b, loc, scale))


def sf(x: Any, a: Any, b: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """The survival function ``betainc(b, a, 1 - y)`` (JAX's)."""
    a, b, y = _y(x, a, b, loc, scale)
    return special.betainc(b, a, 1.0 - y)


def logsf(x: Any, a: Any, b: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``log(sf(x, a, b, loc, scale))``."""
    return bnp.log(sf(x, a, b, loc, scale))
