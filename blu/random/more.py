"""More of ``jax.random``'s samplers: ``laplace``, ``logistic``, ``cauchy``, ``lognormal``,
``rademacher``, ``rayleigh``, ``pareto``, ``weibull_min``, ``poisson``, ``multivariate_normal``,
and ``clone``, ``key_data`` / ``wrap_key_data`` (blu's keys are raw ``uint32[2]`` arrays,
JAX's legacy ``PRNGKey``s, so all three are checks that return the key or its data).

The continuous samplers are inverse CDFs of ``uniform`` draws (Devroye, "Non-Uniform Random
Variate Generation", 1986, ch. 2); ``poisson`` is the inverse CDF searched upward from
``max(0, floor(lam - 8 sqrt(lam)))`` in a ``while_loop``, with the pmf in log space (correct in
distribution; the bits differ from ``jax.random``'s, as for ``gamma``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from blu import lax
from blu import numpy as bnp
from blu.core import dtypes
from blu.core.errors import BluShapeError, BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.random.prng import _as_array, _broadcast, _broadcasts_to, _check_key, _params, _shape_arg
from blu.random.samplers import _float_dtype, _open_unit, normal, uniform

__all__ = [
    "cauchy",
    "clone",
    "key_data",
    "laplace",
    "logistic",
    "lognormal",
    "multivariate_normal",
    "pareto",
    "poisson",
    "rademacher",
    "rayleigh",
    "weibull_min",
    "wrap_key_data",
]


def key_data(keys: Any) -> Any:
    """The ``uint32[..., 2]`` data of a key or a batch of keys (blu's keys are that data
    already: returned as is).

    Raises:
        BluTypeError / BluShapeError: ``keys`` is not a ``uint32[..., 2]`` key array.
    """
    return _check_keys(keys, "key_data")


def _check_keys(keys: Any, name: str) -> Any:
    """``keys`` if it is a key or a batch of keys, ``uint32[..., 2]`` (JAX's ``key_data`` and
    ``wrap_key_data`` take batches; a ``split`` was refused)."""
    if get_aval(_as_array(keys)).ndim <= 1:
        return _check_key(keys, name)
    aval = get_aval(_as_array(keys))
    if aval.dtype != dtypes.uint32:
        raise BluTypeError(
            with_user_line(f"random.{name}: keys must be uint32, got {aval.str_short()}")
        )
    if aval.shape[-1] != 2:
        raise BluShapeError(
            with_user_line(
                f"random.{name}: a batch of keys must have shape (..., 2), got {aval.str_short()}"
            )
        )
    return keys


def clone(key: Any) -> Any:
    """A key to use again after it was consumed (JAX's ``clone``, for its typed keys whose use
    may be checked): blu's keys are immutable ``uint32`` arrays, so the key itself.

    Args:
        key: a ``uint32[2]`` key, or a batch of them ``uint32[..., 2]`` (from ``split``).

    Raises:
        BluTypeError: ``key`` is not a uint32 array ending in an axis of 2.
    """
    aval = get_aval(_as_array(key))
    if aval.dtype != dtypes.uint32 or aval.ndim < 1 or aval.shape[-1] != 2:
        raise BluTypeError(
            with_user_line(
                f"random.clone: key must be a uint32[..., 2] key array, got {aval.str_short()}"
            )
        )
    return key


def wrap_key_data(key_bits_array: Any, *, impl: Any = None) -> Any:
    """A key (or a batch of keys) from its ``uint32[..., 2]`` data (the data itself: blu's
    keys are raw Threefry keys).

    Raises:
        BluValueError: ``impl`` names a generator other than Threefry-2x32.
        BluTypeError / BluShapeError: the data is not ``uint32[..., 2]``.
    """
    if impl not in (None, "threefry2x32"):
        raise BluValueError(
            with_user_line(f"wrap_key_data: impl {impl!r}; blu has only 'threefry2x32'")
        )
    return _check_keys(key_bits_array, "wrap_key_data")


def laplace(key: Any, shape: Sequence[int] = (), dtype: Any = dtypes.float32) -> Any:
    """Standard Laplace draws (density ``exp(-|x|) / 2``), of ``shape`` and float ``dtype``."""
    dtype = _float_dtype(dtype, "laplace")
    u = uniform(key, _shape_arg(shape, "laplace"), dtype, minval=-1.0, maxval=1.0)
    return bnp.sign(u) * -bnp.log1p(-bnp.abs(u))


def logistic(key: Any, shape: Sequence[int] = (), dtype: Any = dtypes.float32) -> Any:
    """Standard logistic draws (CDF ``1 / (1 + exp(-x))``): ``log(u / (1 - u))``."""
    dtype = _float_dtype(dtype, "logistic")
    u = _open_unit(key, _shape_arg(shape, "logistic"), dtype)
    return bnp.log(u) - bnp.log1p(-u)


def cauchy(key: Any, shape: Sequence[int] = (), dtype: Any = dtypes.float32) -> Any:
    """Standard Cauchy draws: ``tan(pi * (u - 1/2))``."""
    dtype = _float_dtype(dtype, "cauchy")
    u = _open_unit(key, _shape_arg(shape, "cauchy"), dtype)
    return bnp.tan(np.pi * (u - 0.5))


def lognormal(
    key: Any, sigma: Any = 1.0, shape: Sequence[int] | None = None, dtype: Any = dtypes.float32
) -> Any:
    """``exp(sigma * z)``, ``z`` standard normal, of ``shape`` (default ``sigma``'s) and
    ``dtype`` (``sigma`` is converted to it and must broadcast to ``shape``, as JAX's).

    Raises:
        BluShapeError: ``sigma`` does not broadcast to ``shape``.
        BluTypeError: ``dtype`` is not a float.
    """
    dtype = _float_dtype(dtype, "lognormal")
    shape, (sigma,) = _params("lognormal", dtype, shape, sigma=sigma)
    return bnp.exp(normal(key, shape, dtype) * sigma)


def rademacher(key: Any, shape: Sequence[int] = (), dtype: Any = dtypes.int32) -> Any:
    """-1 or +1 with probability 1/2 each, of ``dtype`` (int32 by default)."""
    u = uniform(key, _shape_arg(shape, "rademacher"), dtypes.float32)
    return bnp.where(u < 0.5, -1, 1).astype(dtype)


def rayleigh(
    key: Any, scale: Any = 1.0, shape: Sequence[int] | None = None, dtype: Any = dtypes.float32
) -> Any:
    """Rayleigh draws ``scale * sqrt(-2 log u)`` of ``shape`` (default ``scale``'s) and
    ``dtype`` (``scale`` is converted to it and must broadcast to ``shape``, as JAX's).

    Raises:
        BluShapeError: ``scale`` does not broadcast to ``shape``.
        BluTypeError: ``dtype`` is not a float.
    """
    dtype = _float_dtype(dtype, "rayleigh")
    shape, (scale,) = _params("rayleigh", dtype, shape, scale=scale)
    u = _open_unit(key, shape, dtype)
    return scale * bnp.sqrt(-2.0 * bnp.log(u))


def pareto(
    key: Any, b: Any, shape: Sequence[int] | None = None, dtype: Any = dtypes.float32
) -> Any:
    """Pareto draws of shape parameter ``b`` on ``[1, inf)``: ``u ** (-1 / b)``, of ``shape``
    (default ``b``'s) and ``dtype`` (``b`` is converted to it and must broadcast to ``shape``,
    as JAX's).

    Raises:
        BluShapeError: ``b`` does not broadcast to ``shape``.
        BluTypeError: ``dtype`` is not a float.
    """
    dtype = _float_dtype(dtype, "pareto")
    shape, (b,) = _params("pareto", dtype, shape, b=b)
    u = _open_unit(key, shape, dtype)
    return bnp.exp(-bnp.log(u) / b)


def weibull_min(
    key: Any,
    scale: Any,
    concentration: Any,
    shape: Sequence[int] = (),
    dtype: Any = dtypes.float32,
) -> Any:
    """Weibull draws ``scale * (-log u) ** (1 / concentration)`` of ``dtype`` (the parameters
    are converted to it). As JAX's, ``u`` has ``shape`` and the parameters broadcast with it
    (numpy's rules), so the draws have the broadcast shape of ``shape``, ``scale`` and
    ``concentration``.
    """
    dtype = _float_dtype(dtype, "weibull_min")
    scale = lax.convert_element_type(_as_array(scale, dtype), dtype)
    concentration = lax.convert_element_type(_as_array(concentration, dtype), dtype)
    u = _open_unit(key, _shape_arg(shape, "weibull_min"), dtype)
    return scale * bnp.exp(bnp.log(-bnp.log(u)) / concentration)


def poisson(
    key: Any, lam: Any, shape: Sequence[int] | None = None, dtype: Any = dtypes.int32
) -> Any:
    """Poisson counts of rate ``lam`` (broadcast to ``shape``; default ``lam``'s shape).

    The inverse CDF: ``k`` rises from ``max(0, floor(lam - 8 sqrt(lam)))`` while the CDF stays
    below the uniform draw (the mass left below the start is under 1e-15), at most
    ``16 sqrt(lam) + 30`` steps, the pmf computed as ``exp(k log lam - lam - lgamma(k + 1))``
    in float32 (Stirling's form above ``k = 10``). ``lam = 0`` gives 0, a negative or NaN
    ``lam`` -1 (JAX's).

    Args:
        key: ``uint32[2]``.
        lam: rates ``>= 0`` (array or scalar).
        shape: output shape (``lam`` broadcasts to it).
        dtype: an integer dtype (int32 by default).

    Returns:
        Counts of ``shape`` and ``dtype``.

    Raises:
        BluTypeError: ``dtype`` is not an integer dtype (as JAX's).
        BluShapeError: ``lam`` does not broadcast to ``shape``.
    """
    dtype = dtypes.canonicalize(dtype)
    if not dtypes.is_int(dtype):
        raise BluTypeError(with_user_line(f"random.poisson: dtype must be an integer, got {dtype}"))
    lam = bnp.asarray(lam, dtype=np.float32)
    shape = lam.shape if shape is None else _shape_arg(shape, "poisson")
    lam = _broadcast(lam, shape, "lam", "poisson")
    u = uniform(key, shape, np.float32)
    start = bnp.maximum(0.0, bnp.floor(lam - 8.0 * bnp.sqrt(lam)))
    stop = start + bnp.ceil(16.0 * bnp.sqrt(lam)) + 30.0

    def cond(state: Any) -> Any:
        k, cdf, _ = state
        return bnp.any((u >= cdf) & (k < stop))

    def body(state: Any) -> Any:
        k, cdf, comp = state
        go = (u >= cdf) & (k < stop)
        k = bnp.where(go, k + 1.0, k)
        # the CDF summed with Kahan's compensation: thousands of float32 terms for a large lam
        y = _poisson_pmf(k, lam) - comp
        t = cdf + y
        return k, bnp.where(go, t, cdf), bnp.where(go, (t - cdf) - y, comp)

    zero = bnp.zeros_like(u)
    k, _, _ = lax.while_loop(cond, body, (start, _poisson_pmf(start, lam), zero))
    return bnp.where(lam > 0, k, bnp.where(lam == 0, 0.0, -1.0)).astype(dtype)


def _poisson_pmf(k: Any, lam: Any) -> Any:
    """``lam^k e^-lam / k!`` in float32: below ``k = 10`` directly; above, Stirling's form
    ``exp(-lam f((k - lam) / lam) - log(2 pi k) / 2 - R(k))`` with ``f(t) = (1 + t) log1p(t)
    - t`` (a series for ``|t| < 0.1``) and ``R`` Stirling's remainder: ``k log lam - lam -
    lgamma(k + 1)`` cancelled its terms of ``~lam`` (the draws' variance was 1.6 lam at
    ``lam = 3e4``, ``0.002 lam`` at ``1e7``)."""
    direct = bnp.exp(k * bnp.log(bnp.maximum(lam, 1e-30)) - lam - lax.lgamma(k + 1.0))
    big = k >= 10.0
    kb = bnp.where(big, k, 10.0)
    lb = bnp.where(big & (lam > 0), lam, 1.0)
    t = (kb - lb) / lb
    ts = bnp.where(bnp.abs(t) < 0.1, t, 0.0)
    series = (
        ts * ts * (0.5 - ts * (1 / 6 - ts * (1 / 12 - ts * (1 / 20 - ts * (1 / 30 - ts / 42)))))
    )
    tl = bnp.where(bnp.abs(t) < 0.1, 0.5, t)
    f = bnp.where(bnp.abs(t) < 0.1, series, (1.0 + tl) * bnp.log1p(tl) - tl)
    inv = 1.0 / kb
    rest = inv * (1 / 12 - inv * inv * (1 / 360 - inv * inv / 1260))
    stirling = bnp.exp(-lb * f - 0.5 * bnp.log(2 * np.pi * kb) - rest)
    return bnp.where(big & (lam > 0), stirling, direct)


def multivariate_normal(
    key: Any,
    mean: Any,
    cov: Any,
    shape: Sequence[int] | None = None,
    dtype: Any = dtypes.float32,
    method: str = "cholesky",
) -> Any:
    """Multivariate normal draws ``mean + L z`` with ``L L^T = cov``.

    Args:
        key: ``uint32[2]``.
        mean: ``(..., n)``.
        cov: ``(..., n, n)``, symmetric positive (semi-)definite.
        shape: the batch shape of the draws (default: ``mean``'s and ``cov``'s batch shapes
            broadcast); the result is ``shape + (n,)``.
        dtype: float dtype.
        method: ``"cholesky"`` (positive definite ``cov``), ``"eigh"`` or ``"svd"``
            (semi-definite).

    Raises:
        BluValueError: an unknown ``method``, or ``mean`` and ``cov`` disagree on ``n``.
        BluShapeError: the batch shape of ``mean`` or ``cov`` does not broadcast to ``shape``
            (as JAX's).
    """
    dtype = _float_dtype(dtype, "multivariate_normal")
    mean = bnp.asarray(mean, dtype=dtype)
    cov = bnp.asarray(cov, dtype=dtype)
    n = mean.shape[-1] if mean.ndim else 0
    if cov.ndim < 2 or cov.shape[-2:] != (n, n):
        raise BluValueError(
            with_user_line(
                f"multivariate_normal: mean has shape {mean.shape}, cov {cov.shape}; "
                f"cov must end in ({n}, {n})"
            )
        )
    batch = {"mean": mean.shape[:-1], "cov": cov.shape[:-2]}
    if shape is None:
        shape = bnp.broadcast_shapes(*batch.values())
    shape = _shape_arg(shape, "multivariate_normal")
    for what, b in batch.items():  # JAX's _check_shape: each batch shape broadcasts to shape
        if not _broadcasts_to(b, shape):
            raise BluShapeError(
                with_user_line(
                    f"random.multivariate_normal: {what} of batch shape {b} does not "
                    f"broadcast to shape {shape}"
                )
            )
    if method == "cholesky":
        factor = bnp.linalg.cholesky(cov)
    elif method == "eigh":
        w, v = bnp.linalg.eigh(cov)
        factor = v * bnp.sqrt(bnp.maximum(w, 0.0))[..., None, :]
    elif method == "svd":
        u, s, _ = bnp.linalg.svd(cov)
        factor = u * bnp.sqrt(s)[..., None, :]
    else:
        raise BluValueError(
            with_user_line(
                f"multivariate_normal: method {method!r}; expected 'cholesky', 'eigh' or 'svd'"
            )
        )
    z = normal(key, tuple(shape) + (n,), dtype)
    return mean + bnp.einsum("...ij,...j->...i", factor, z)
