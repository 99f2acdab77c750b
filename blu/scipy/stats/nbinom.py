"""``jax.scipy.stats.nbinom``: failures before the ``n``-th success of probability ``p``."""

from __future__ import annotations

from typing import Any

from blu import numpy as bnp
from blu.scipy import special
from blu.scipy.stats._common import promote

__all__ = ["logpmf", "pmf"]


def logpmf(k: Any, n: Any, p: Any, loc: Any = 0) -> Any:
    """``gammaln(y + n) - gammaln(n) - gammaln(y + 1) + xlogy(n, p) + xlogy(y, 1 - p)`` with
    ``y = k - loc``; ``-inf`` for ``y < 0``. A non-integer ``y`` is not masked (as JAX's)."""
    k, n, p, loc = promote(k, n, p, loc)
    y = k - loc
    comb = special.gammaln(y + n) - special.gammaln(n) - special.gammaln(y + 1.0)
    out = comb + special.xlogy(n, p) + special.xlogy(y, 1.0 - p)
    return bnp.where(y < 0, -bnp.inf, out)


def pmf(k: Any, n: Any, p: Any, loc: Any = 0) -> Any:
    """``exp(logpmf(k, n, p, loc))``."""
    return bnp.exp(logpmf(k, n, p, loc))
