"""``jax.scipy.stats.gamma``: the gamma distribution of shape ``a`` (its CDF needs the
incomplete gamma function, not built: ``docs/coming_from_jax.md``)."""

from __future__ import annotations

from typing import Any

from blu import numpy as bnp
from blu.scipy import special
from blu.scipy.stats._common import standardize

__all__ = ["logpdf", "pdf"]


def logpdf(x: Any, a: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``xlogy(a - 1, y) - y - gammaln(a) - log(scale)`` with ``y = (x - loc) / scale``;
    ``-inf`` for ``y < 0``."""
    y, a, scale = standardize(x, a, loc, scale)
    out = special.xlogy(a - 1.0, y) - y - special.gammaln(a) - bnp.log(scale)
    return bnp.where(y < 0, -bnp.inf, out)


def pdf(x: Any, a: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``exp(logpdf(x, a, loc, scale))``."""
    return bnp.exp(logpdf(x, a, loc, scale))
