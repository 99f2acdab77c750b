"""``jax.scipy.stats.wrapcauchy``: the wrapped Cauchy distribution on ``[0, 2 pi]`` of shape
``c``."""

from __future__ import annotations

import math
from typing import Any

from blu import numpy as bnp
from blu.scipy.stats._common import promote

__all__ = ["logpdf", "pdf"]


def logpdf(x: Any, c: Any) -> Any:
    """``log(1 - c^2) - log(2 pi) - log(1 + c^2 - 2 c cos x)``; ``-inf`` outside
    ``[0, 2 pi]``, NaN unless ``0 < c < 1`` and at a NaN ``x`` (scipy's; JAX's is ``-inf``)."""
    x, c = promote(x, c)
    out = bnp.log1p(-c * c) - math.log(2 * math.pi) - bnp.log(1.0 + c * c - 2.0 * c * bnp.cos(x))
    out = bnp.where((x < 0) | (x > 2 * math.pi), -bnp.inf, out)  # NaN at a NaN x (JAX's -inf)
    return bnp.where((c > 0) & (c < 1), out, bnp.nan).astype(out.dtype)


def pdf(x: Any, c: Any) -> Any:
    """``exp(logpdf(x, c))``."""
    return bnp.exp(logpdf(x, c))
