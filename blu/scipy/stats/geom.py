"""``jax.scipy.stats.geom``: the number of trials up to the first success of probability ``p``."""

from __future__ import annotations

from typing import Any

from blu import numpy as bnp
from blu.scipy import special
from blu.scipy.stats._common import promote

__all__ = ["logpmf", "pmf"]


def logpmf(k: Any, p: Any, loc: Any = 0) -> Any:
    """``xlog1py(y - 1, -p) + log(p)`` with ``y = k - loc``; ``-inf`` for ``y <= 0``. A
    non-integer ``y`` is not masked (as JAX's)."""
    k, p, loc = promote(k, p, loc)
    y = k - loc
    out = special.xlog1py(y - 1.0, -p) + bnp.log(p)
    return bnp.where(y <= 0, -bnp.inf, out)


def pmf(k: Any, p: Any, loc: Any = 0) -> Any:
    """``exp(logpmf(k, p, loc))``."""
    return bnp.exp(logpmf(k, p, loc))
