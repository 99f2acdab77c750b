"""``jax.scipy.stats.binom``: successes in ``n`` trials of probability ``p`` (its CDF needs the
incomplete beta function, not built: ``docs/coming_from_jax.md``)."""

from __future__ import annotations

from typing import Any

from blu import numpy as bnp
from blu.scipy import special
from blu.scipy.stats._common import promote

__all__ = ["logpmf", "pmf"]


def logpmf(k: Any, n: Any, p: Any, loc: Any = 0) -> Any:
    """``log comb(n, y) + xlogy(y, p) + xlog1py(n - y, -p)`` with ``y = k - loc``; ``-inf``
    for ``y < 0`` or ``y > n``. A non-integer ``y`` is not masked (as JAX's: the gamma-function
    form continues between the integers, where scipy gives ``-inf``)."""
    k, n, p, loc = promote(k, n, p, loc)
    y = k - loc
    comb = special.gammaln(n + 1.0) - special.gammaln(y + 1.0) - special.gammaln(n - y + 1.0)
    out = comb + special.xlogy(y, p) + special.xlog1py(n - y, -p)
    return bnp.where((y < 0) | (y > n), -bnp.inf, out)


def pmf(k: Any, n: Any, p: Any, loc: Any = 0) -> Any:
    """``exp(logpmf(k, n, p, loc))``."""
    return bnp.exp(logpmf(k, n, p, loc))
