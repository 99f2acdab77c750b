"""``jax.scipy.stats.betabinom``: successes in ``n`` trials whose probability is drawn from
``Beta(a, b)``."""

from __future__ import annotations

from typing import Any

from blu import numpy as bnp
from blu.scipy import special
from blu.scipy.stats._common import promote

__all__ = ["logpmf", "pmf"]


def logpmf(k: Any, n: Any, a: Any, b: Any, loc: Any = 0) -> Any:
    """``-log1p(n) - betaln(n - y + 1, y + 1) + betaln(y + a, n - y + b) - betaln(a, b)`` with
    ``y = floor(k) - loc`` (JAX's); 0 for ``y = n = 0``, ``-inf`` for ``y < 0`` or ``y > n``, NaN
    where ``n < 0``, ``a <= 0`` or ``b <= 0``."""
    k, n, a, b, loc = promote(k, n, a, b, loc)
    y = bnp.floor(k) - loc
    inside = (y >= 0) & (y <= n)
    ys = bnp.where(inside, y, 0.0)  # no NaN from betaln's negative arguments off the support
    comb = -bnp.log1p(n) - special.betaln(n - ys + 1.0, ys + 1.0)
    out = comb + special.betaln(ys + a, n - ys + b) - special.betaln(a, b)
    out = bnp.where((ys == 0) & (n == 0), 0.0, out)
    out = bnp.where(inside, out, -bnp.inf)
    bad = (n < 0) | (a <= 0) | (b <= 0)
    return bnp.where(bad, bnp.nan, out).astype(out.dtype)


def pmf(k: Any, n: Any, a: Any, b: Any, loc: Any = 0) -> Any:
    """``exp(logpmf(k, n, a, b, loc))``."""
    return bnp.exp(logpmf(k, n, a, b, loc))
