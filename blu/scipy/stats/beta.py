"""``jax.scipy.stats.beta``: the beta distribution of shapes ``a``, ``b`` (its CDF needs the
incomplete beta function, not built: ``docs/coming_from_jax.md``)."""

from __future__ import annotations

from typing import Any

from blu import numpy as bnp
from blu.scipy import special
from blu.scipy.stats._common import standardize

__all__ = ["logpdf", "pdf"]


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
