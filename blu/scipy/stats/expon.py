"""``jax.scipy.stats.expon``: the exponential distribution of rate ``1 / scale`` from ``loc``."""

from __future__ import annotations

from typing import Any

from blu import numpy as bnp
from blu.nn.log_means import log1mexp
from blu.scipy.stats._common import promote

__all__ = ["cdf", "logcdf", "logpdf", "logsf", "pdf", "ppf", "sf"]


def _z(x: Any, loc: Any, scale: Any) -> tuple:
    x, loc, scale = promote(x, loc, scale)
    below = x < loc
    return bnp.where(below, 0.0, (x - loc) / scale).astype(x.dtype), below, scale


def logpdf(x: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``-(x - loc) / scale - log(scale)``; ``-inf`` below ``loc``."""
    z, below, scale = _z(x, loc, scale)
    return bnp.where(below, -bnp.inf, -z - bnp.log(scale))


def pdf(x: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``exp(logpdf(x, loc, scale))``."""
    return bnp.exp(logpdf(x, loc, scale))


def cdf(x: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``-expm1(-(x - loc) / scale)``; 0 below ``loc``."""
    z, below, _ = _z(x, loc, scale)
    return bnp.where(below, 0.0, -bnp.expm1(-z)).astype(z.dtype)


def logcdf(x: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``log1mexp((x - loc) / scale)``; ``-inf`` below ``loc``."""
    z, below, _ = _z(x, loc, scale)
    return bnp.where(below, -bnp.inf, log1mexp(z))


def sf(x: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``exp(-(x - loc) / scale)``; 1 below ``loc``."""
    z, below, _ = _z(x, loc, scale)
    return bnp.where(below, 1.0, bnp.exp(-z)).astype(z.dtype)


def logsf(x: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``-(x - loc) / scale``; 0 below ``loc``."""
    z, below, _ = _z(x, loc, scale)
    return bnp.where(below, 0.0, -z).astype(z.dtype)


def ppf(q: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``loc - scale * log1p(-q)``; NaN outside [0, 1]."""
    q, loc, scale = promote(q, loc, scale)
    out = loc - scale * bnp.log1p(-q)
    return bnp.where((q < 0) | (q > 1), bnp.nan, out).astype(q.dtype)
