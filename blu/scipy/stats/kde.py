"""``jax.scipy.stats.gaussian_kde``: the kernel density estimate of weighted points, a sum of
normal densities of one covariance (the data's weighted covariance times a bandwidth factor
squared) centred on the points. A pytree (its arrays are the leaves), so it goes through
``jit``, ``vmap`` and ``grad`` as an argument."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from blu import numpy as bnp
from blu import random
from blu.core import dtypes
from blu.core.errors import BluShapeError, BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.core.pytree_registry import register_pytree_node_class
from blu.numpy._promote import asarray_operand, promote_dtypes, to_inexact
from blu.scipy import linalg
from blu.scipy.special import logsumexp, ndtr

__all__ = ["gaussian_kde"]

_LOG_2PI = math.log(2 * math.pi)
_LEAVES = ("neff", "dataset", "weights", "covariance", "inv_cov", "factor")


def _fail(cls: type, msg: str) -> Exception:
    return cls(with_user_line(f"gaussian_kde: {msg}"))


def _real(x: Any, what: str) -> Any:
    x = to_inexact(asarray_operand(x))
    if dtypes.is_complex(get_aval(x).dtype):
        raise _fail(BluTypeError, f"{what} must be real, got {get_aval(x).str_short()}")
    return x


@register_pytree_node_class
class gaussian_kde:
    """A Gaussian kernel density estimator (``scipy.stats.gaussian_kde``,
    ``jax.scipy.stats.gaussian_kde``).

    The density at ``x`` is ``sum_i w_i N(x; dataset[:, i], covariance)``, ``covariance`` the
    weighted covariance of the data (``numpy.cov`` with ``aweights``) times ``factor**2``.

    Args:
        dataset: the points, ``(n,)`` for one dimension or ``(d, n)``; real (integers become
            the default float), more than one element.
        bw_method: the bandwidth factor: ``'scott'`` (default, ``neff**(-1/(d+4))``),
            ``'silverman'`` (``(neff (d+2) / 4)**(-1/(d+4))``), a scalar, or a function of the
            estimator (its ``dataset``, ``weights``, ``neff``, ``d``, ``n`` are set) giving it.
        weights: the points' weights ``(n,)`` (default equal), normalized to sum to 1.

    Attributes:
        dataset: ``(d, n)``; weights: ``(n,)``; d, n: the sizes; neff: the effective number of
        points ``1 / sum(weights**2)``; factor: the bandwidth factor; covariance, inv_cov:
        the kernel's covariance ``(d, d)`` and its inverse.

    Raises:
        BluTypeError: complex data or points.
        BluValueError: a dataset of one element, an unknown ``bw_method``.
        BluShapeError: weights that are not ``(n,)``.
    """

    neff: Any
    dataset: Any
    weights: Any
    covariance: Any
    inv_cov: Any
    factor: Any

    def __init__(self, dataset: Any, bw_method: Any = None, weights: Any = None) -> None:
        data = bnp.atleast_2d(_real(dataset, "dataset"))
        if get_aval(data).size <= 1:
            raise _fail(
                BluValueError,
                f"the dataset needs more than one element, got {get_aval(data).str_short()}",
            )
        d, n = get_aval(data).shape
        if weights is None:
            w = bnp.full(n, 1.0 / n, dtype=get_aval(data).dtype)
        else:
            data, w = promote_dtypes(data, _real(weights, "weights"))
            w = bnp.atleast_1d(w)
            if get_aval(w).shape != (n,):
                raise _fail(
                    BluShapeError,
                    f"weights must be ({n},) for a dataset {get_aval(data).str_short()}, got "
                    f"{get_aval(w).str_short()}",
                )
            w = w / bnp.sum(w)
        self.dataset, self.weights = data, w
        self.neff = 1 / bnp.sum(w * w)
        self.set_bandwidth(bw_method)

    # ---- the pytree ----

    def tree_flatten(self) -> tuple[tuple[Any, ...], None]:
        return tuple(getattr(self, k) for k in _LEAVES), None

    @classmethod
    def tree_unflatten(cls, aux_data: Any, children: Sequence[Any]) -> gaussian_kde:
        del aux_data
        kde = cls.__new__(cls)
        for k, v in zip(_LEAVES, children):
            setattr(kde, k, v)
        return kde

    @property
    def d(self) -> int:
        """The number of dimensions."""
        return get_aval(self.dataset).shape[0]

    @property
    def n(self) -> int:
        """The number of points."""
        return get_aval(self.dataset).shape[1]

    # ---- the bandwidth ----

    def set_bandwidth(self, bw_method: Any = None) -> None:
        """Set ``factor``, ``covariance`` and ``inv_cov`` from ``bw_method`` (as the
        constructor's; SciPy's method, in place; JAX's raises ``NotImplementedError``)."""
        d = self.d
        if bw_method is None or (isinstance(bw_method, str) and bw_method == "scott"):
            factor = self.neff ** (-1.0 / (d + 4))
        elif isinstance(bw_method, str) and bw_method == "silverman":
            factor = (self.neff * (d + 2) / 4.0) ** (-1.0 / (d + 4))
        elif isinstance(bw_method, str):
            raise _fail(
                BluValueError,
                f"bw_method must be 'scott', 'silverman', a scalar or a callable, got "
                f"{bw_method!r}",
            )
        elif callable(bw_method):
            factor = bw_method(self)
        elif bnp.ndim(bw_method) == 0:
            factor = bw_method
        else:
            raise _fail(
                BluValueError,
                f"bw_method must be 'scott', 'silverman', a scalar or a callable, got "
                f"{bw_method!r}",
            )
        dt = get_aval(self.dataset).dtype
        factor = bnp.asarray(factor, dtype=dt)
        cov = bnp.atleast_2d(bnp.cov(self.dataset, rowvar=True, bias=False, aweights=self.weights))
        self.factor = factor
        self.covariance = cov * factor**2
        self.inv_cov = bnp.linalg.inv(cov) / factor**2

    # ---- densities ----

    def _points(self, points: Any) -> Any:
        """``points`` as ``(d, m)``: ``(m,)`` for one dimension, a ``(d,)`` vector one point."""
        p = bnp.atleast_2d(_real(points, "points"))
        d, m = get_aval(p).shape[0], get_aval(p).shape[-1]
        if get_aval(p).ndim != 2 or d != self.d:
            if get_aval(p).ndim == 2 and d == 1 and m == self.d:
                return bnp.reshape(p, (self.d, 1))
            raise _fail(
                BluShapeError,
                f"points {get_aval(p).str_short()} do not have the dataset's {self.d} "
                f"dimensions (the dataset is {get_aval(self.dataset).str_short()})",
            )
        return p

    def _log_terms(self, points: Any) -> Any:
        """``(n, m)``: ``log w_i + log N(x_j; dataset_i, covariance)``."""
        p, data, w, prec = promote_dtypes(self._points(points), self.dataset, self.weights,
                                          self.inv_cov)  # fmt: skip
        white = bnp.linalg.cholesky(prec)  # prec = white white^T
        x, y = data.T @ white, p.T @ white
        diff = x[:, None, :] - y[None, :, :]
        log_norm = bnp.sum(bnp.log(bnp.diagonal(white))) - 0.5 * self.d * _LOG_2PI
        return bnp.log(w)[:, None] + log_norm - 0.5 * bnp.sum(diff * diff, axis=-1)

    def evaluate(self, points: Any) -> Any:
        """The density at ``points`` (``(d, m)``, or ``(m,)`` when ``d == 1``, or a ``(d,)``
        point): ``(m,)``.

        Raises:
            BluShapeError: points of another dimension.
            BluTypeError: complex points.
        """
        return bnp.sum(bnp.exp(self._log_terms(points)), axis=0)

    __call__ = evaluate

    def pdf(self, x: Any) -> Any:
        """The density at ``x`` (:meth:`evaluate`)."""
        return self.evaluate(x)

    def logpdf(self, x: Any) -> Any:
        """The log density at ``x`` (as :meth:`evaluate`), a ``logsumexp`` over the points."""
        return logsumexp(self._log_terms(x), axis=0)

    # ---- integrals ----

    def _convolve(self, cov: Any, centres: Any, weights: Any, at: Any) -> Any:
        """``sum_i weights_i N(at_j; centres_i, covariance + cov)`` for the columns of ``at``
        ``(d, m)``: ``(m,)``."""
        chol = bnp.linalg.cholesky(self.covariance + cov)
        log_norm = -bnp.sum(bnp.log(bnp.diagonal(chol))) - 0.5 * self.d * _LOG_2PI
        m = get_aval(at).shape[1]
        diff = centres[:, :, None] - at[:, None, :]  # (d, n, m)
        flat = bnp.reshape(diff, (self.d, -1))
        alpha = linalg.cho_solve((chol, True), flat)
        energy = bnp.reshape(0.5 * bnp.sum(flat * alpha, axis=0), (-1, m))
        return bnp.sum(bnp.exp(log_norm - energy) * weights[:, None], axis=0)

    def integrate_gaussian(self, mean: Any, cov: Any) -> Any:
        """The integral of the density times a normal density of ``mean`` ``(d,)`` and
        covariance ``cov`` ``(d, d)``.

        Raises:
            BluShapeError: ``mean`` or ``cov`` not of the dataset's dimensions.
        """
        mean = bnp.atleast_1d(bnp.squeeze(_real(mean, "mean")))
        cov = bnp.atleast_2d(_real(cov, "cov"))
        if get_aval(mean).shape != (self.d,) or get_aval(cov).shape != (self.d, self.d):
            raise _fail(
                BluShapeError,
                f"integrate_gaussian wants mean ({self.d},) and cov ({self.d}, {self.d}), got "
                f"{get_aval(mean).str_short()} and {get_aval(cov).str_short()}",
            )
        return self._convolve(cov, self.dataset, self.weights, mean[:, None])[0]

    def integrate_box_1d(self, low: Any, high: Any) -> Any:
        """The probability of ``[low, high]`` (scalars) under a one-dimensional density.

        Raises:
            BluValueError: a density of more than one dimension.
            BluShapeError: limits that are not scalars.
        """
        if self.d != 1:
            raise _fail(BluValueError, f"integrate_box_1d needs d == 1, the dataset has {self.d}")
        if bnp.ndim(low) != 0 or bnp.ndim(high) != 0:
            raise _fail(
                BluShapeError,
                f"the limits of integrate_box_1d must be scalars, got shapes {bnp.shape(low)} "
                f"and {bnp.shape(high)}",
            )
        sigma = bnp.sqrt(self.covariance[0, 0])
        lo = (low - self.dataset[0]) / sigma
        hi = (high - self.dataset[0]) / sigma
        return bnp.sum(self.weights * (ndtr(hi) - ndtr(lo)))

    def integrate_box(self, low_bounds: Any, high_bounds: Any, maxpts: Any = None) -> Any:
        """Not built (as JAX's): use :meth:`integrate_box_1d`.

        Raises:
            BluValueError: always (JAX's ``NotImplementedError``).
        """
        del low_bounds, high_bounds, maxpts
        raise _fail(BluValueError, "integrate_box is not built (as JAX); use integrate_box_1d")

    def integrate_kde(self, other: gaussian_kde) -> Any:
        """The integral of the product of this density and ``other``'s.

        Raises:
            BluValueError: estimators of different dimensions.
        """
        if other.d != self.d:
            raise _fail(
                BluValueError,
                f"integrate_kde needs estimators of one dimension, got {self.d} and {other.d}",
            )
        small, large = (self, other) if self.n < other.n else (other, self)
        dens = self._convolve(other.covariance, large.dataset, large.weights, small.dataset)
        return bnp.sum(dens * small.weights)

    # ---- sampling ----

    def resample(self, key: Any, shape: Sequence[int] | int = ()) -> Any:
        """Draws from the density: a point drawn by its weight plus a normal draw of the
        kernel's covariance.

        Args:
            key: a PRNG key.
            shape: the draws' batch shape (static).

        Returns:
            ``(d,) + shape`` of the dataset's dtype (JAX's transposes the draws' batch axes,
            ``(d,) + shape[::-1]`` for the noise: equal only for at most one batch axis).
        """
        shape = (shape,) if dtypes.is_int_scalar(shape) else tuple(shape)
        keys = random.split(key)
        ind = random.choice(keys[0], self.n, shape=shape, p=self.weights)
        dt = get_aval(self.dataset).dtype
        eps = random.multivariate_normal(
            keys[1], bnp.zeros(self.d, dt), self.covariance, shape=shape, dtype=dt
        )
        return self.dataset[:, ind] + bnp.moveaxis(eps, -1, 0)
