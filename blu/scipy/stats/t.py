"""``jax.scipy.stats.t``: Student's t distribution of ``df`` degrees of freedom; its CDF is a
regularized incomplete beta function (``blu.scipy.special.betainc``)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from blu import numpy as bnp
from blu.scipy import special
from blu.scipy.stats._common import promote, standardize

__all__ = ["cdf", "logpdf", "pdf"]


def _log_norm_rest(half: Any) -> Any:
    """``log(sqrt(df) Gamma(df/2) / Gamma((df+1)/2)) - log(2) / 2`` for ``half = df/2``:
    ``log(h) / 2 - (gammaln(h + 1/2) - gammaln(h))``, 0 at ``df = inf``. From ``h = 10`` (30
    in float64) the series ``1/(8h) - 1/(192h^3) + 1/(640h^5) - 17/(14336h^7)``: the two
    ``gammaln`` cancel there (at ``df = 1e6`` in float32 the log-density was 0.08 off)."""
    big = 30.0 if half.dtype == np.float64 else 10.0
    h = bnp.where(half >= big, half, big)
    inv = 1.0 / h
    inv2 = inv * inv
    series = inv * (1 / 8 - inv2 * (1 / 192 - inv2 * (1 / 640 - inv2 * (17 / 14336))))
    hs = bnp.where(half >= big, 1.0, half)
    direct = 0.5 * bnp.log(hs) - (special.gammaln(hs + 0.5) - special.gammaln(hs))
    return bnp.where(half >= big, series, direct)


def logpdf(x: Any, df: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``gammaln((df+1)/2) - gammaln(df/2) - log(df pi scale^2)/2
    - (df+1)/2 log1p(((x - loc) / scale)^2 / df)``; the normal's at ``df = inf``."""
    z, df, scale = standardize(x, df, loc, scale)
    half = 0.5 * df
    norm = 0.5 * bnp.log(2 * math.pi * scale * scale) + _log_norm_rest(half)
    kernel = bnp.where(bnp.isinf(df), 0.5 * z * z, (half + 0.5) * bnp.log1p(z * z / df))
    return -(norm + kernel)


def pdf(x: Any, df: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """``exp(logpdf(x, df, loc, scale))``."""
    return bnp.exp(logpdf(x, df, loc, scale))


def cdf(x: Any, df: Any, loc: Any = 0, scale: Any = 1) -> Any:
    """For ``|z| < 1`` (``z = (x - loc) / scale``, ``r = z^2 / df``) ``1/2 + sign(z)
    betainc(1/2, df/2, r / (1 + r)) / 2``, which keeps ``z`` near 0 (``1/2 - betainc(df/2,
    1/2, 1 / (1 + r)) / 2`` rounded to 1/2 there: 0.5 at ``z = -4e-4, df = 30`` for
    0.49984); beyond, ``betainc(df/2, 1/2, 1 / (1 + r)) / 2`` for ``z < 0``, one minus it
    above; ``ndtr(z)`` at ``df = inf`` (it was NaN); below float64, from ``df = 1e5`` the
    normal's expansion in ``1 / df``."""
    x, df, loc, scale = promote(x, df, loc, scale)
    z = (x - loc) / scale
    r = z * z / df
    half = 0.5 * df
    mid = 0.5 * special.betainc(0.5, half, r / (1.0 + r))
    central = 0.5 + bnp.where(z < 0, -mid, mid)
    tail = 0.5 * special.betainc(half, 0.5, 1.0 / (1.0 + r))
    out = bnp.where(z * z < 1.0, central, bnp.where(z < 0, tail, 1.0 - tail))
    if z.dtype != np.float64:
        # float32's betainc at (1/2, df/2) loses digits for a huge df (5% off at 1e6):
        # the expansion in 1/df about the normal (A&S 26.7.5's first two terms; 2.5e-5
        # relative at df = 1e5, z = -10)
        zc = bnp.where(bnp.abs(z) < 40.0, z, 0.0)  # (the density is 0 beyond: no inf * 0)
        z2 = zc * zc
        nu = bnp.where(df >= _EXPAND_FROM, df, _EXPAND_FROM)
        corr = (z2 + 1.0) * zc / (4.0 * nu) + (((3.0 * z2 + 19.0) * z2 + 17.0) * z2 - 15.0) * zc / (
            96.0 * nu * nu
        )
        near = special.ndtr(z) - bnp.exp(-0.5 * z2) / math.sqrt(2 * math.pi) * corr
        out = bnp.where(df >= _EXPAND_FROM, near, out)
    return bnp.where(bnp.isinf(df) & (df > 0), special.ndtr(z), out).astype(z.dtype)


_EXPAND_FROM = 1e5
