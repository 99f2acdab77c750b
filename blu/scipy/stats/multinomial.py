"""``jax.scipy.stats.multinomial``: counts ``x`` (last axis) of ``n`` draws over categories of
probabilities ``p``."""

from __future__ import annotations

from typing import Any

from blu import numpy as bnp
from blu.core.errors import BluValueError
from blu.scipy import special
from blu.scipy.stats._common import as_floats

__all__ = ["logpmf", "pmf"]


def logpmf(x: Any, n: Any, p: Any) -> Any:
    """``gammaln(n + 1) + sum(xlogy(x, p) - gammaln(x + 1))`` over the last axis; ``-inf`` where
    the counts do not sum to ``n`` (over the last axis: JAX's sums over all axes). ``x`` and ``n``
    must be integers (JAX's ``ValueError``; here ``BluValueError``)."""
    xd, nd = bnp.result_type(x), bnp.result_type(n)
    if not (bnp.issubdtype(xd, bnp.integer) and bnp.issubdtype(nd, bnp.integer)):
        raise BluValueError(
            f"multinomial.logpmf: x and n must be of integer type; got x.dtype={xd}, n.dtype={nd}"
        )
    (p,) = as_floats(p)
    x = bnp.asarray(x).astype(p.dtype)
    n = bnp.asarray(n).astype(p.dtype)
    out = special.gammaln(n + 1.0) + bnp.sum(special.xlogy(x, p) - special.gammaln(x + 1.0), -1)
    return bnp.where(bnp.sum(x, -1) == n, out, -bnp.inf)


def pmf(x: Any, n: Any, p: Any) -> Any:
    """``exp(logpmf(x, n, p))``."""
    return bnp.exp(logpmf(x, n, p))
