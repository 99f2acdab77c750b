"""Continuous distributions built on the uniform and normal samplers: ``exponential``,
``gamma``/``loggamma`` (Marsaglia-Tsang rejection), ``beta`` and ``dirichlet`` (normalized
gammas), with ``jax.random``'s signatures, shapes and dtypes.

These are correct in distribution (tested against scipy.stats) but do not reproduce
``jax.random``'s bits. ``gamma``'s rejection loop is a ``while_loop`` over the whole sample
(each round redraws the elements not yet accepted), so it runs eagerly, under ``jit`` and
``vmap``.

Derivatives by the parameters (``grad``/``jvp``/``vjp``, under ``jit`` and ``vmap``) are the
implicit reparameterization gradients of Figurnov, Mohamed & Mnih 2018, "Implicit
Reparameterization Gradients" (as ``jax.random`` and TensorFlow): a sample moves with ``a`` as
its CDF value stays fixed, ``dx/da = -(dF/da) / (dF/dx)`` (``lax.random_gamma_grad``), applied
to the log-gamma sample by a ``custom_jvp``, so the rejection loop itself is never
differentiated (which, with its draws held fixed, gives a biased derivative). ``beta`` and
``dirichlet`` are functions of log-gamma samples and differentiate through them. Their
expectations are unbiased: ``E[dx/da] = dE[x]/da``. Second derivatives are not defined.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from blu import lax
from blu.core import dtypes
from blu.core.errors import BluShapeError, with_user_line
from blu.core.interpreter import get_aval
from blu.lax.random_gamma import random_gamma_grad_log
from blu.random.prng import _as_array, _broadcast, _check_key, _shape_arg, split
from blu.random.samplers import _compute_dtype, _float_dtype, _prologue, normal, uniform
from blu.transforms.custom_derivatives import custom_jvp

__all__ = ["beta", "dirichlet", "exponential", "gamma", "loggamma"]


def exponential(key: Any, shape: Sequence[int] = (), dtype: Any = dtypes.float32) -> Any:
    """Standard exponential floats (rate 1): ``-log1p(-u)`` with ``u`` uniform in [0, 1).

    Args:
        key: ``uint32[2]``.
        shape: output shape.
        dtype: a float dtype.

    Returns:
        An array of ``shape`` and ``dtype``, values in ``[0, inf)`` (finite), mean 1.
    """
    dtype = _float_dtype(dtype, "exponential")
    u = uniform(key, _shape_arg(shape, "exponential"), dtype)
    return lax.neg(lax.log1p(lax.neg(u)))


def _full(shape: tuple[int, ...], v: float, dtype: Any) -> Any:
    return lax.full(shape, v, dtype)


def _log_gamma_draw(key: Any, a: Any, shape: tuple[int, ...], dtype: Any) -> Any:
    """log of Gamma(a, 1) samples (``a`` of ``shape`` and ``dtype``, a float32/float64).

    Marsaglia & Tsang (2000), "A simple method for generating gamma variables", ACM TOMS 26(3):
    for ``b = a`` (or ``a + 1`` when ``a < 1``), ``d = b - 1/3``, ``c = 1/sqrt(9 d)``: draw
    ``x ~ N(0, 1)``, ``v = (1 + c x)^3``, accept ``d v`` when ``v > 0`` and
    ``log u < x^2/2 + d - d v + d log v``. For ``a < 1``, ``Gamma(a) = Gamma(a + 1) u^(1/a)``
    (their section 6), added in log space so tiny ``a`` does not underflow to 0.
    """
    one = _full(shape, 1.0, dtype)
    small = lax.lt(a, one)
    b = lax.select(small, lax.add(a, one), a)
    d = lax.sub(b, _full(shape, 1.0 / 3.0, dtype))
    c = lax.rsqrt(lax.mul(_full(shape, 9.0, dtype), d))
    key, k_boost = split(key)
    half = _full(shape, 0.5, dtype)

    def cond(state):
        _, done, _ = state
        return lax.not_(lax.reduce_and(done, tuple(range(len(shape)))))

    def body(state):
        k, done, out = state
        k, kx, ku = split(k, 3)
        x = normal(kx, shape, dtype)
        u = uniform(ku, shape, dtype)
        v = lax.add(one, lax.mul(c, x))
        v = lax.mul(lax.mul(v, v), v)
        pos = lax.gt(v, _full(shape, 0.0, dtype))
        safe_v = lax.select(pos, v, one)  # log only of positive values
        rhs = lax.add(
            lax.mul(half, lax.mul(x, x)),
            lax.mul(d, lax.add(lax.sub(one, safe_v), lax.log(safe_v))),
        )
        ok = lax.and_(pos, lax.lt(lax.log(u), rhs))
        take = lax.and_(ok, lax.not_(done))
        out = lax.select(take, lax.add(lax.log(d), lax.log(safe_v)), out)
        return k, lax.or_(done, ok), out

    # a NaN, infinite or <= -2/3 (d <= 0) is never accepted: done from the start (the loop
    # never ended: gamma(key, -1.) hung), NaN (+inf for a = +inf), as JAX's
    valid = lax.and_(lax.gt(d, _full(shape, 0.0, dtype)), lax.lt(d, _full(shape, np.inf, dtype)))
    done0 = lax.not_(valid)
    _, _, log_g = lax.while_loop(cond, body, (key, done0, _full(shape, 0.0, dtype)))
    # boost for a < 1: + log(u) / a with u in (0, 1]
    u = lax.sub(one, uniform(k_boost, shape, dtype))
    boost = lax.select(small, lax.div(lax.log(u), a), _full(shape, 0.0, dtype))
    inf = _full(shape, np.inf, dtype)
    bad = lax.select(lax.eq(a, inf), inf, _full(shape, np.nan, dtype))
    return lax.select(valid, lax.add(log_g, boost), bad)


def _log_gamma_fn(key: Any, a: Any, shape: tuple[int, ...], dtype: Any) -> Any:
    return _log_gamma_draw(key, a, shape, dtype)


# the sample as a function of ``a`` (the key, shape and dtype fixed): its derivative is the
# implicit one, d log x / da = random_gamma_grad(a, x) / x, from log x (exact where x underflows)
_log_gamma_sample = custom_jvp(_log_gamma_fn, nondiff_argnums=(0, 2, 3))


@_log_gamma_sample.defjvp
def _log_gamma_sample_jvp(key, shape, dtype, primals, tangents):
    (a,), (ta,) = primals, tangents
    log_x = _log_gamma_sample(key, a, shape, dtype)
    return log_x, lax.mul(ta, random_gamma_grad_log(a, log_x))


def loggamma(
    key: Any, a: Any, shape: Sequence[int] | None = None, dtype: Any = dtypes.float32
) -> Any:
    """``log`` of Gamma(a, 1) samples, accurate where the samples themselves underflow
    (``a`` near 0).

    Args:
        key: ``uint32[2]``.
        a: shape parameter(s) > 0, broadcastable to ``shape``.
        shape: output shape (default ``a``'s shape).
        dtype: a float dtype (bfloat16/float16 are sampled in float32 and rounded).

    Returns:
        An array of ``shape`` and ``dtype``.

    Raises:
        BluShapeError: ``a`` does not broadcast to ``shape``.
        BluTypeError: ``key`` is not a key, or ``dtype`` is not a float.
    """
    key, dtype, shape, (a,) = _prologue("loggamma", key, dtype, shape, compute=True, a=a)
    comp = _compute_dtype(dtype)
    return lax.convert_element_type(_log_gamma_sample(key, a, shape, comp), dtype)


def gamma(key: Any, a: Any, shape: Sequence[int] | None = None, dtype: Any = dtypes.float32) -> Any:
    """Gamma(a, 1) samples (density ``x^(a-1) e^-x / Gamma(a)``; mean and variance ``a``).

    Scale by ``theta`` for Gamma(a, theta). Sampled by Marsaglia-Tsang rejection (see
    ``loggamma``); a ``while_loop`` redraws the rejected elements. Differentiable in ``a``
    (forward and reverse mode, first order): ``dx/da = lax.random_gamma_grad(a, x)``, the
    implicit reparameterization gradient (Figurnov et al. 2018), unbiased in expectation.

    Args:
        key: ``uint32[2]``.
        a: shape parameter(s) > 0, broadcastable to ``shape``.
        shape: output shape (default ``a``'s shape).
        dtype: a float dtype.

    Returns:
        An array of ``shape`` and ``dtype``, values >= 0 (0 only by underflow for tiny ``a``).

    Raises:
        BluShapeError: ``a`` does not broadcast to ``shape``.
        BluTypeError: ``key`` is not a key, or ``dtype`` is not a float.
    """
    key, dtype, shape, (a,) = _prologue("gamma", key, dtype, shape, compute=True, a=a)
    comp = _compute_dtype(dtype)
    return lax.convert_element_type(lax.exp(_log_gamma_sample(key, a, shape, comp)), dtype)


def beta(
    key: Any,
    a: Any,
    b: Any,
    shape: Sequence[int] | None = None,
    dtype: Any = dtypes.float32,
) -> Any:
    """Beta(a, b) samples on [0, 1]: ``G_a / (G_a + G_b)`` for independent gammas, formed from
    their logarithms (no 0/0 when both underflow).

    Args:
        key: ``uint32[2]``.
        a, b: parameters > 0, broadcastable to ``shape``.
        shape: output shape (default: ``a`` and ``b`` broadcast together).
        dtype: a float dtype.

    Returns:
        An array of ``shape`` and ``dtype`` (mean ``a / (a + b)``).

    Raises:
        BluShapeError: ``a`` or ``b`` does not broadcast to ``shape``.
    """
    key, dtype, shape, (a, b) = _prologue("beta", key, dtype, shape, compute=True, a=a, b=b)
    comp = _compute_dtype(dtype)
    ka, kb = split(key)
    la = _log_gamma_sample(ka, a, shape, comp)
    lb = _log_gamma_sample(kb, b, shape, comp)
    m = lax.max(la, lb)
    ea, eb = lax.exp(lax.sub(la, m)), lax.exp(lax.sub(lb, m))
    return lax.convert_element_type(lax.div(ea, lax.add(ea, eb)), dtype)


def dirichlet(
    key: Any, alpha: Any, shape: Sequence[int] | None = None, dtype: Any = dtypes.float32
) -> Any:
    """Dirichlet(alpha) samples: points of the simplex, ``G_i / sum_j G_j`` for independent
    ``G_i ~ Gamma(alpha_i)``, normalized in log space.

    Args:
        key: ``uint32[2]``.
        alpha: concentrations > 0 of shape ``(..., K)``, ``K >= 1``.
        shape: the batch shape (default ``alpha.shape[:-1]``); ``alpha.shape[:-1]`` must
            broadcast to it.
        dtype: a float dtype.

    Returns:
        An array of shape ``shape + (K,)`` and ``dtype`` whose last axis sums to 1.

    Raises:
        BluShapeError: ``alpha`` is a scalar, or does not broadcast to ``shape + (K,)``.
    """
    dtype = _float_dtype(dtype, "dirichlet")
    key = _check_key(key, "dirichlet")
    comp = _compute_dtype(dtype)
    alpha = lax.convert_element_type(_as_array(alpha, comp), comp)
    aval = get_aval(alpha)
    if aval.ndim < 1:
        raise BluShapeError(
            with_user_line(f"random.dirichlet: alpha must have a last axis, got {aval.str_short()}")
        )
    batch = aval.shape[:-1] if shape is None else _shape_arg(shape, "dirichlet")
    full_shape = tuple(batch) + aval.shape[-1:]
    alpha = _broadcast(alpha, full_shape, "alpha", "dirichlet")
    lg = _log_gamma_sample(key, alpha, full_shape, comp)
    last = len(full_shape) - 1
    m = lax.reduce_max(lg, (last,))
    e = lax.exp(lax.sub(lg, lax.broadcast_in_dim(m, full_shape, tuple(range(last)))))
    s = lax.reduce_sum(e, (last,))
    out = lax.div(e, lax.broadcast_in_dim(s, full_shape, tuple(range(last))))
    return lax.convert_element_type(out, dtype)
