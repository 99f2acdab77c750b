"""``jax.scipy.stats.truncnorm``: the normal distribution of mean ``loc`` and deviation
``scale`` truncated to ``[a, b]`` (in deviations from ``loc``, scipy's convention)."""

from __future__ import annotations

from typing import Any

from blu import numpy as bnp
from blu.nn.log_means import log1mexp
from blu.scipy import special
from blu.scipy.stats import norm
from blu.scipy.stats._common import promote

__all__ = ["cdf", "logcdf", "logpdf", "logsf", "pdf", "sf"]


def _log_mass(a: Any, b: Any) -> Any:
    """``log(ndtr(b) - ndtr(a))`` for ``a <= b``: a difference of ``log_ndtr``s in the tail on
    one side of 0 (mirrored to the lower tail), ``log1p(-ndtr(a) - ndtr(-b))`` across it."""
    right = a > 0
    lo = bnp.where(right, -b, a)
    hi = bnp.where(right, -a, b)
    log_hi, log_lo = special.log_ndtr(hi), special.log_ndtr(lo)
    tail = log_hi + log1mexp(log_hi - log_lo)
    central = bnp.log1p(-special.ndtr(a) - special.ndtr(-b))
    return bnp.where((b > 0) & ~right, central, tail)


def _bad(a: Any, b: Any) -> Any:
    """Where the truncation is empty or NaN: NaN there (scipy's; JAX's tests ``a >= b``)."""
    return ~(a < b)


def logpdf(x: Any, a: Any, b: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``norm.logpdf(x, loc, scale) - log(ndtr(b) - ndtr(a))``; ``-inf`` outside
    ``[a, b]`` (standardized), NaN where ``a >= b``."""
    x, a, b, loc, scale = promote(x, a, b, loc, scale)
    z = (x - loc) / scale
    out = norm.logpdf(x, loc, scale) - _log_mass(a, b)
    out = bnp.where((z < a) | (z > b), -bnp.inf, out)
    return bnp.where(_bad(a, b), bnp.nan, out).astype(out.dtype)


def pdf(x: Any, a: Any, b: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``exp(logpdf(x, a, b, loc, scale))``."""
    return bnp.exp(logpdf(x, a, b, loc, scale))


def logcdf(x: Any, a: Any, b: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``log(mass(a, z) / mass(a, b))``, from ``log1p(-sf)`` near 1; 0 for ``z >= b``,
    ``-inf`` for ``z <= a``, NaN where ``a >= b`` (and where ``z`` is NaN: JAX's is 0 there)."""
    x, a, b, loc, scale = promote(x, a, b, loc, scale)
    z = (x - loc) / scale
    inside = (z > a) & (z < b)
    fa, fb = bnp.isfinite(a), bnp.isfinite(b)
    mid = bnp.where(fa & fb, 0.5 * (a + b), bnp.where(fa, a + 1.0, bnp.where(fb, b - 1.0, 0.0)))
    zs = bnp.where(inside, z, mid).astype(z.dtype)  # no NaN from the masses off the support
    total = _log_mass(a, b)
    lcdf = _log_mass(a, zs) - total
    lsf = _log_mass(zs, b) - total
    out = bnp.where(lcdf > -0.1, bnp.log1p(-bnp.exp(lsf)), lcdf)
    out = bnp.where(z >= b, 0.0, bnp.where(z <= a, -bnp.inf, out))
    return bnp.where(_bad(a, b) | bnp.isnan(z), bnp.nan, out).astype(out.dtype)


def cdf(x: Any, a: Any, b: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``exp(logcdf(x, a, b, loc, scale))``."""
    return bnp.exp(logcdf(x, a, b, loc, scale))


def logsf(x: Any, a: Any, b: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``logcdf(-x, -b, -a, -loc, scale)`` (the mirrored distribution)."""
    x, a, b, loc, scale = promote(x, a, b, loc, scale)
    return logcdf(-x, -b, -a, -loc, scale)


def sf(x: Any, a: Any, b: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``exp(logsf(x, a, b, loc, scale))``."""
    return bnp.exp(logsf(x, a, b, loc, scale))
