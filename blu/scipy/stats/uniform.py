"""``jax.scipy.stats.uniform``: the uniform distribution on ``[loc, loc + scale]``."""

from __future__ import annotations

from typing import Any

from blu import numpy as bnp
from blu.scipy.stats._common import promote

__all__ = ["cdf", "logpdf", "pdf", "ppf"]


def logpdf(x: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``-log(scale)`` on ``[loc, loc + scale]``, ``-inf`` outside, NaN where ``x - loc`` is."""
    x, loc, scale = promote(x, loc, scale)
    out = bnp.where(bnp.isnan(x - loc), bnp.nan, -bnp.log(scale))
    return bnp.where((x < loc) | (x > loc + scale), -bnp.inf, out)


def pdf(x: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``exp(logpdf(x, loc, scale))``."""
    return bnp.exp(logpdf(x, loc, scale))


def cdf(x: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``(x - loc) / scale`` clipped to [0, 1]; NaN where that quotient is (scipy's: ``x`` and
    ``loc`` both infinite of one sign, ``x - loc`` and ``scale`` both infinite, a NaN)."""
    x, loc, scale = promote(x, loc, scale)
    inner = (x - loc) / scale
    out = bnp.where(x < loc, 0.0, bnp.where(x >= loc + scale, 1.0, inner))
    return bnp.where(bnp.isnan(inner), bnp.nan, out).astype(x.dtype)


def ppf(q: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``loc + q * scale``; NaN outside [0, 1]."""
    q, loc, scale = promote(q, loc, scale)
    return bnp.where((q < 0) | (q > 1), bnp.nan, q * scale + loc).astype(q.dtype)
