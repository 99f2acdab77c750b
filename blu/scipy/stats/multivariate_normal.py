"""``jax.scipy.stats.multivariate_normal``: the normal distribution of mean vector ``mean`` and
covariance ``cov`` (a matrix, or a scalar for ``cov * I``), its density by Cholesky's factor."""

from __future__ import annotations

import math
from typing import Any

from blu import numpy as bnp
from blu.core.errors import BluShapeError, BluValueError, with_user_line
from blu.scipy.stats._common import as_floats

__all__ = ["logpdf", "pdf"]

_LOG_2PI = math.log(2 * math.pi)


def logpdf(x: Any, mean: Any, cov: Any, allow_singular: Any = None) -> Any:
    """``-(x - mean)^T cov^-1 (x - mean) / 2 - log det(2 pi cov) / 2`` over the last axis of
    ``x`` and ``mean`` (batched over the leading ones); a scalar ``mean`` makes it
    univariate with variance ``cov``.

    Raises:
        BluValueError: ``allow_singular`` is given (as JAX).
        BluShapeError: ``cov`` is neither a scalar nor a matrix of ``mean``'s size.
    """
    if allow_singular is not None:
        raise BluValueError("multivariate_normal.logpdf: allow_singular is not supported (as JAX)")
    x, mean, cov = as_floats(x, mean, cov)
    if mean.ndim == 0:
        y = x - mean
        return -0.5 * y * y / cov - 0.5 * (_LOG_2PI + bnp.log(cov))
    n = mean.shape[-1]
    y = x - mean
    if cov.ndim == 0:
        return -0.5 * bnp.sum(y * y, axis=-1) / cov - 0.5 * n * (_LOG_2PI + bnp.log(cov))
    if cov.ndim < 2 or cov.shape[-2:] != (n, n):
        raise BluShapeError(
            with_user_line(
                f"multivariate_normal.logpdf: cov of shape {cov.shape} is not a scalar or a "
                f"({n}, {n}) matrix for mean of shape {mean.shape}"
            )
        )
    lower = bnp.linalg.cholesky(cov)
    batch = bnp.broadcast_shapes(y.shape[:-1], lower.shape[:-2])
    lower = bnp.broadcast_to(lower, batch + (n, n))
    y = bnp.broadcast_to(y, batch + (n,))
    z = bnp.linalg.solve_triangular(lower, y[..., None], lower=True)[..., 0]
    logdet = bnp.sum(bnp.log(bnp.diagonal(lower, axis1=-2, axis2=-1)), axis=-1)
    return -0.5 * bnp.sum(z * z, axis=-1) - 0.5 * n * _LOG_2PI - logdet


def pdf(x: Any, mean: Any, cov: Any) -> Any:
    """``exp(logpdf(x, mean, cov))``."""
    return bnp.exp(logpdf(x, mean, cov))
