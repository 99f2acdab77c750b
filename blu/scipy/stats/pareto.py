"""``jax.scipy.stats.pareto``: the Pareto distribution of shape ``b`` from ``loc + scale``."""

from __future__ import annotations

from typing import Any

from blu import numpy as bnp
from blu.nn.log_means import log1mexp
from blu.scipy.stats._common import promote, standardize

__all__ = ["cdf", "logcdf", "logpdf", "logsf", "pdf", "ppf", "sf"]


def _logz(x: Any, b: Any, loc: Any, scale: Any) -> tuple:
    """``log z`` (``z = (x - loc) / scale``, 0 below the support ``z < 1``), ``b``, ``scale``
    and the mask ``z < 1``."""
    z, b, scale = standardize(x, b, loc, scale)
    below = z < 1
    return bnp.log(bnp.where(below, 1.0, z)).astype(z.dtype), b, scale, below


def logpdf(x: Any, b: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``log(b / scale) - (b + 1) log z`` with ``z = (x - loc) / scale``; ``-inf`` for
    ``z < 1``."""
    logz, b, scale, below = _logz(x, b, loc, scale)
    return bnp.where(below, -bnp.inf, bnp.log(b / scale) - (b + 1.0) * logz)


def pdf(x: Any, b: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``exp(logpdf(x, b, loc, scale))``."""
    return bnp.exp(logpdf(x, b, loc, scale))


def logsf(x: Any, b: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``-b log z``; 0 for ``z < 1``."""
    logz, b, _, below = _logz(x, b, loc, scale)
    return bnp.where(below, 0.0, -b * logz).astype(logz.dtype)


def sf(x: Any, b: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``z^-b``; 1 for ``z < 1``."""
    return bnp.exp(logsf(x, b, loc, scale))


def cdf(x: Any, b: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``1 - z^-b``, as ``-expm1(-b log z)``; 0 for ``z < 1``."""
    return -bnp.expm1(logsf(x, b, loc, scale))


def logcdf(x: Any, b: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``log1p(-z^-b)``; ``-inf`` for ``z < 1``."""
    logz, b, _, below = _logz(x, b, loc, scale)
    return bnp.where(below, -bnp.inf, log1mexp(b * logz))


def ppf(q: Any, b: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``loc + scale (1 - q)^(-1/b)``; NaN outside [0, 1]."""
    q, b, loc, scale = promote(q, b, loc, scale)
    out = loc + scale * bnp.exp(-bnp.log1p(-q) / b)
    return bnp.where((q < 0) | (q > 1), bnp.nan, out).astype(q.dtype)
