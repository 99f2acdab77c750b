"""``jax.scipy.stats.gennorm``: the generalized normal distribution of shape ``beta`` (density
proportional to ``exp(-|x|^beta)``; no ``loc`` or ``scale``, as JAX's)."""

from __future__ import annotations

import math
from typing import Any

from blu import numpy as bnp
from blu.scipy import special
from blu.scipy.stats._common import promote

__all__ = ["cdf", "logpdf", "pdf"]


def logpdf(x: Any, beta: Any) -> Any:
    """``log(beta / 2) - gammaln(1 / beta) - |x|^beta``."""
    x, beta = promote(x, beta)
    return bnp.log(beta) - math.log(2.0) - special.gammaln(1.0 / beta) - bnp.abs(x) ** beta


def pdf(x: Any, beta: Any) -> Any:
    """``exp(logpdf(x, beta))``."""
    return bnp.exp(logpdf(x, beta))


def cdf(x: Any, beta: Any) -> Any:
    """``gammaincc(1 / beta, |x|^beta) / 2`` below 0, one minus it above (scipy's form: JAX's
    ``(1 + sign(x) gammainc(1 / beta, |x|^beta)) / 2`` rounds to 0 in the lower tail)."""
    x, beta = promote(x, beta)
    half = 0.5 * special.gammaincc(1.0 / beta, bnp.abs(x) ** beta)
    return bnp.where(x < 0, half, 1.0 - half)
