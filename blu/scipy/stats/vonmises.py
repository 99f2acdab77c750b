"""``jax.scipy.stats.vonmises``: the von Mises (circular normal) distribution of concentration
``kappa``."""

from __future__ import annotations

import math
from typing import Any

from blu import numpy as bnp
from blu.scipy import special
from blu.scipy.stats._common import promote

__all__ = ["logpdf", "pdf"]


def logpdf(x: Any, kappa: Any) -> Any:
    """``kappa (cos x - 1) - log(2 pi i0e(kappa))``, over every real ``x`` (period ``2 pi``, as
    scipy's); the uniform ``-log(2 pi)`` at ``kappa = 0`` (scipy's; NaN as JAX's), NaN where
    ``kappa < 0``."""
    x, kappa = promote(x, kappa)
    out = kappa * (bnp.cos(x) - 1.0) - bnp.log(special.i0e(kappa)) - math.log(2 * math.pi)
    return bnp.where(kappa >= 0, out, bnp.nan).astype(out.dtype)


def pdf(x: Any, kappa: Any) -> Any:
    """``exp(logpdf(x, kappa))``."""
    return bnp.exp(logpdf(x, kappa))
