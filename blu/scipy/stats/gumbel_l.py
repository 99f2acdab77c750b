"""``jax.scipy.stats.gumbel_l``: the left-skewed Gumbel distribution (``gumbel_r`` mirrored)."""

from __future__ import annotations

from typing import Any

from blu import numpy as bnp
from blu.nn.log_means import log1mexp
from blu.scipy.stats._common import promote
from blu.scipy.stats.gumbel_r import _z  # z, scale and the scale > 0 test are the same

__all__ = ["cdf", "logcdf", "logpdf", "logsf", "pdf", "ppf", "sf"]


def logpdf(x: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``-log(scale) + z - exp(z)`` with ``z = (x - loc) / scale``; NaN unless
    ``scale > 0``."""
    z, scale, bad = _z(x, loc, scale)
    return bnp.where(bad, bnp.nan, -bnp.log(scale) + z - bnp.exp(z))


def pdf(x: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``exp(logpdf(x, loc, scale))``."""
    return bnp.exp(logpdf(x, loc, scale))


def logcdf(x: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``log(1 - exp(-exp(z)))``, as ``log1mexp(exp(z))``."""
    z, _, bad = _z(x, loc, scale)
    return bnp.where(bad, bnp.nan, log1mexp(bnp.exp(z)))


def cdf(x: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``-expm1(-exp(z))``."""
    z, _, bad = _z(x, loc, scale)
    return bnp.where(bad, bnp.nan, -bnp.expm1(-bnp.exp(z)))


def logsf(x: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``-exp(z)``."""
    z, _, bad = _z(x, loc, scale)
    return bnp.where(bad, bnp.nan, -bnp.exp(z))


def sf(x: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``exp(-exp(z))``."""
    return bnp.exp(logsf(x, loc, scale))


def ppf(p: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``loc + scale log(-log1p(-p))``: ``-inf`` at 0 and ``inf`` at 1 (scipy's; JAX's are
    NaN), NaN outside [0, 1] or unless ``scale > 0``."""
    p, loc, scale = promote(p, loc, scale)
    out = loc + scale * bnp.log(-bnp.log1p(-p))
    bad = (p < 0) | (p > 1) | ~(scale > 0)
    return bnp.where(bad, bnp.nan, out).astype(out.dtype)
