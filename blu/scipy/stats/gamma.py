"""``jax.scipy.stats.gamma``: the gamma distribution of shape ``a``; its CDF and survival
function are the regularized incomplete gamma functions (``blu.scipy.special.gammainc``)."""

from __future__ import annotations

from typing import Any

from blu import numpy as bnp
from blu.scipy import special
from blu.scipy.stats._common import promote, standardize

__all__ = ["cdf", "logcdf", "logpdf", "logsf", "pdf", "sf"]


def logpdf(x: Any, a: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``xlogy(a - 1, y) - y - gammaln(a) - log(scale)`` with ``y = (x - loc) / scale``;
    ``-inf`` for ``y < 0``."""
    y, a, scale = standardize(x, a, loc, scale)
    out = special.xlogy(a - 1.0, y) - y - special.gammaln(a) - bnp.log(scale)
    return bnp.where(y < 0, -bnp.inf, out)


def pdf(x: Any, a: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``exp(logpdf(x, a, loc, scale))``."""
    return bnp.exp(logpdf(x, a, loc, scale))


def _y(x: Any, a: Any, loc: Any, scale: Any) -> tuple:
    x, a, loc, scale = promote(x, a, loc, scale)
    return a, bnp.clip((x - loc) / scale, 0.0, bnp.inf)


def cdf(x: Any, a: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``gammainc(a, y)`` with ``y = (x - loc) / scale`` clipped to ``[0, inf]`` (JAX's)."""
    a, y = _y(x, a, loc, scale)
    return special.gammainc(a, y)


def logcdf(x: Any, a: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``log(cdf(x, a, loc, scale))``; where the CDF is below ``1e-30`` (it underflows in
    float32) the log of its series."""
    return _log_gammainc(*_y(x, a, loc, scale))


def _log_gammainc(a: Any, y: Any) -> Any:
    """``log(gammainc(a, y))``: below ``1e-30``, ``a log y - y - gammaln(a + 1) + log(sum_n
    y^n / ((a + 1)...(a + n)))`` (20 terms; there ``y`` is well below ``a + 1``), which stays
    finite where ``gammainc`` underflows (``chi2.logcdf(1e-3, 30)`` was -inf for -141.9)."""
    p = special.gammainc(a, y)
    tiny = p < 1e-30
    ys = bnp.where(tiny, y, 0.0)
    asafe = bnp.where(tiny, a, 1.0)
    term = bnp.ones_like(ys)
    total = bnp.ones_like(ys)
    for n in range(1, 21):
        term = term * ys / (asafe + n)
        total = total + term
    series = special.xlogy(asafe, ys) - ys - special.gammaln(asafe + 1.0) + bnp.log(total)
    return bnp.where(tiny & (y > 0) & (a > 0), series, bnp.log(p))


def sf(x: Any, a: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """The survival function ``gammaincc(a, y)``, whose small upper tail keeps its digits."""
    a, y = _y(x, a, loc, scale)
    return special.gammaincc(a, y)


def logsf(x: Any, a: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``log(sf(x, a, loc, scale))``."""
    return bnp.log(sf(x, a, loc, scale))
