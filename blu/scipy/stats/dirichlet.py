"""``jax.scipy.stats.dirichlet``: the Dirichlet distribution on the simplex, its components
along the first axis (as JAX and scipy)."""

from __future__ import annotations

from typing import Any

from blu import numpy as bnp
from blu.core.errors import BluShapeError, with_user_line
from blu.scipy import special
from blu.scipy.stats._common import as_floats

__all__ = ["logpdf", "pdf"]


def logpdf(x: Any, alpha: Any) -> Any:
    """``sum(xlogy(alpha - 1, x)) - sum(gammaln(alpha)) + gammaln(sum(alpha))`` over the first
    axis; ``x`` may leave out the last component (``1 - sum(x)``, as JAX); ``-inf`` off the
    simplex (a component not positive, or components not summing to 1 within 1e-6).

    Raises:
        BluShapeError: ``alpha`` is not 1-d, or ``x``'s first axis is not ``alpha``'s size (or
            one less).
    """
    x, alpha = as_floats(x, alpha)
    if alpha.ndim != 1:
        raise BluShapeError(
            with_user_line(f"dirichlet.logpdf: alpha must be 1-d, got shape {alpha.shape}")
        )
    k = alpha.shape[0]
    if x.ndim == 0 or x.shape[0] not in (k, k - 1):
        raise BluShapeError(
            with_user_line(
                f"dirichlet.logpdf: x of shape {x.shape} needs a first axis of {k} (or {k - 1}) "
                f"components for alpha of shape {alpha.shape}"
            )
        )
    if x.shape[0] == k - 1:
        x = bnp.concatenate([x, 1.0 - bnp.sum(x, axis=0, keepdims=True)], axis=0)
    a = alpha.reshape(alpha.shape + (1,) * (x.ndim - 1))
    norm = bnp.sum(special.gammaln(alpha)) - special.gammaln(bnp.sum(alpha))
    out = bnp.sum(special.xlogy(a - 1.0, x), axis=0) - norm
    simplex = bnp.all(x > 0, axis=0) & (bnp.abs(bnp.sum(x, axis=0) - 1.0) < 1e-6)
    return bnp.where(simplex, out, -bnp.inf)


def pdf(x: Any, alpha: Any) -> Any:
    """``exp(logpdf(x, alpha))``."""
    return bnp.exp(logpdf(x, alpha))
