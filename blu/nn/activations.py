"""The ``jax.nn`` activations under JAX's names and conventions: ``relu``, ``sigmoid``, ``silu``,
``gelu`` (its derivative a rule of its own that a GPU product takes as its epilogue) and the
rest, numerically stable and with finite gradients at their special points.

Each takes a float array (integers and bools become float32; ``relu`` keeps its operand's dtype)
and returns one of its shape and dtype unless stated. Conventions at kinks (where the derivative
is undefined) follow JAX's: ``relu``, ``relu6`` and ``hard_sigmoid`` have derivative 0 at their
corners, ``leaky_relu`` and ``hard_tanh`` 1, ``elu``/``celu``/``selu`` take the left branch's
derivative at 0 (``alpha``, 1, ``scale * alpha``).
"""

from __future__ import annotations

import math
from typing import Any

import blu.numpy as bnp
from blu import lax
from blu.core.errors import BluShapeError, BluValueError, with_user_line
from blu.nn.operands import _axes, _float_operand, _upcast
from blu.transforms.ad_api import jvp
from blu.transforms.custom_derivatives import custom_jvp

__all__ = [
    "celu",
    "elu",
    "gelu",
    "glu",
    "hard_sigmoid",
    "hard_silu",
    "hard_swish",
    "hard_tanh",
    "identity",
    "leaky_relu",
    "log_sigmoid",
    "mish",
    "relu",
    "relu6",
    "selu",
    "sigmoid",
    "silu",
    "soft_sign",
    "softplus",
    "sparse_plus",
    "sparse_sigmoid",
    "squareplus",
    "standardize",
    "swish",
    "tanh",
]


@custom_jvp
def _relu(x: Any) -> Any:
    return bnp.maximum(x, bnp.zeros_like(x))  # NaN stays NaN (as maximum, relu6, leaky_relu)


# derivative 0 at 0 (JAX's convention) and at NaN (JAX's ``select(x > 0, g, 0)``)
_relu.defjvps(lambda t, y, x: bnp.where(x > 0, t, bnp.zeros_like(t)))


def relu(x: Any) -> Any:
    """``max(x, 0)`` elementwise (NaN gives NaN); its derivative at 0 is taken as 0 (at NaN
    too, as JAX's)."""
    return _relu(bnp.asarray(x))


def sigmoid(x: Any) -> Any:
    """The logistic function ``1 / (1 + exp(-x))`` elementwise."""
    return lax.logistic(_float_operand(x))


def silu(x: Any) -> Any:
    """``x * sigmoid(x)`` (a.k.a. swish; Elfwing et al. 2017) elementwise."""
    x = _float_operand(x)
    return x * lax.logistic(x)


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_GELU_CUBIC = 0.044715
# beyond this |x| the tanh form's sech^2 term is below 1e-37 and the erf form's density below
# 1e-300: the derivatives clip x there, so that inf * 0 never makes a NaN
_GELU_CLIP = 10.0
_ERF_GELU_CLIP = 40.0


@custom_jvp
def _gelu_tanh(x: Any) -> Any:
    # tanh of x clipped as the derivative clips it (the same values: +-1 beyond |x| = 10 to
    # float64 precision), so that for float32/float64 x common-subexpression elimination leaves
    # one tanh per element for the value and its gradient
    xs = bnp.clip(x, -_GELU_CLIP, _GELU_CLIP)
    inner = _SQRT_2_OVER_PI * (xs + _GELU_CUBIC * (xs * xs * xs))
    return 0.5 * x * (1.0 + bnp.tanh(inner))


@custom_jvp
def _gelu_erf(x: Any) -> Any:
    return 0.5 * x * (1.0 + lax.erf(x * (1.0 / math.sqrt(2.0))))


def _gelu_tanh_grad_fun(x: Any) -> Any:
    """d/dx of the tanh form, from ``x`` alone (float32 for half floats, cast back):
    ``0.5 (1 + th) + 0.5 x (1 - th^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)``, ``th = tanh(u)``."""
    # tanh(u) is +-1 to float64 precision beyond |x| = 10 (u > 43), so clipping there changes
    # nothing and keeps x^3 from overflowing
    xs = bnp.clip(_upcast(x), -_GELU_CLIP, _GELU_CLIP)
    th = bnp.tanh(_SQRT_2_OVER_PI * (xs + _GELU_CUBIC * (xs * xs * xs)))
    poly = _SQRT_2_OVER_PI * (1.0 + (3.0 * _GELU_CUBIC) * (xs * xs))
    return (0.5 * (1.0 + th) + 0.5 * xs * (1.0 - th * th) * poly).astype(x.dtype)


def _gelu_erf_grad(x: Any) -> Any:
    """d/dx of the erf form: ``Phi(x) + x phi(x)`` (the normal CDF and density)."""
    x32 = _upcast(x)
    xs = bnp.clip(x32, -_ERF_GELU_CLIP, _ERF_GELU_CLIP)
    cdf = 0.5 * (1.0 + lax.erf(x32 * (1.0 / math.sqrt(2.0))))
    pdf = bnp.exp(-0.5 * (xs * xs)) * (1.0 / math.sqrt(2.0 * math.pi))
    return (cdf + xs * pdf).astype(x.dtype)


# The derivative as a call of its own that a backend recognizes: the CUDA plan computes
# ``g * gelu_tanh_grad(pre)`` in the product that makes ``g`` (cuBLASLt's DGELU epilogue, reading
# the pre-activation the forward's GELU_AUX_BIAS product kept), so the derivative is never stored.
# Differentiated (higher derivatives) as its body.
_gelu_tanh_grad = custom_jvp(_gelu_tanh_grad_fun)
_gelu_tanh_grad.defjvp(lambda p, t: jvp(_gelu_tanh_grad_fun, p, t))
_gelu_tanh_grad.lowering_name = "gelu_tanh_grad"

# The rules multiply the tangent by a derivative computed from x alone, so reverse mode keeps
# one residual per call instead of every intermediate of the elementwise chain.
_gelu_tanh.defjvp(lambda p, t: (_gelu_tanh(p[0]), t[0] * _gelu_tanh_grad(p[0])))
_gelu_tanh.lowering_name = "gelu_tanh"  # a GPU product before it takes it as its epilogue
_gelu_erf.defjvp(lambda p, t: (_gelu_erf(p[0]), t[0] * _gelu_erf_grad(p[0])))


def gelu(x: Any, approximate: bool = True) -> Any:
    """Gaussian error linear unit (Hendrycks & Gimpel 2016), elementwise.

    The derivative is a custom JVP rule computed from ``x`` alone (in float32 for
    bfloat16/float16, rounded to ``x``'s dtype), so reverse mode saves one array per call, not
    the intermediates of the chain; higher derivatives differentiate that rule.

    Args:
        x: float array.
        approximate: True: the tanh form ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``
            (GPT-2's); False: the exact ``0.5 x (1 + erf(x / sqrt(2)))``.

    Returns:
        An array of ``x``'s shape and dtype.
    """
    x = _float_operand(x)
    return _gelu_tanh(x) if approximate else _gelu_erf(x)


def _zeros(x: Any) -> Any:
    return bnp.zeros_like(x)


def identity(x: Any) -> Any:
    """``x`` unchanged (``jax.nn.identity``)."""
    return bnp.asarray(x)


def tanh(x: Any) -> Any:
    """The hyperbolic tangent elementwise (``jax.nn.tanh``)."""
    return bnp.tanh(_float_operand(x))


@custom_jvp
def _softplus(x: Any) -> Any:
    # log(1 + e^x) = max(x, 0) + log1p(e^-|x|): no overflow for large |x|
    return bnp.where(x > 0, x, _zeros(x)) + bnp.log1p(bnp.exp(-bnp.abs(x)))


_softplus.defjvps(lambda t, y, x: t * lax.logistic(x))


def softplus(x: Any) -> Any:
    """``log(1 + exp(x))`` elementwise, without overflow; its derivative is ``sigmoid(x)``.

    Args:
        x: float array (integers become float32).

    Returns:
        An array of ``x``'s shape and dtype; ``softplus(-inf) = 0``, ``softplus(inf) = inf``.
    """
    return _softplus(_float_operand(x))


def log_sigmoid(x: Any) -> Any:
    """``log(sigmoid(x)) = -softplus(-x)`` elementwise (finite for large negative ``x``)."""
    return -softplus(-_float_operand(x))


def soft_sign(x: Any) -> Any:
    """``x / (|x| + 1)`` elementwise."""
    x = _float_operand(x)
    return x / (bnp.abs(x) + 1)


swish = silu


def sparse_plus(x: Any) -> Any:
    """Sparse plus (Martins & Astudillo 2016's sparsemax, as a softplus): 0 for ``x <= -1``,
    ``(x + 1)**2 / 4`` for ``-1 < x < 1``, ``x`` for ``x >= 1`` (continuously differentiable)."""
    x = _float_operand(x)
    # clipped so the untaken middle branch stays finite: its zero cotangent times an infinite
    # factor would be NaN in reverse mode at x = +-inf
    mid = bnp.square(bnp.minimum(bnp.maximum(x, -bnp.ones_like(x)), bnp.ones_like(x)) + 1) / 4
    # NaN fails both tests and takes the middle piece, which keeps it (as JAX's)
    return bnp.where(x <= -1, _zeros(x), bnp.where(x >= 1, x, mid))


def sparse_sigmoid(x: Any) -> Any:
    """The derivative of ``sparse_plus``: 0, ``(x + 1) / 2``, 1 on the same three pieces (NaN
    gives NaN, as JAX's ``0.5 * clip(x + 1, 0, 2)``)."""
    x = _float_operand(x)
    return bnp.where(x <= -1, _zeros(x), bnp.where(x >= 1, bnp.ones_like(x), (x + 1) / 2))


def elu(x: Any, alpha: Any = 1.0) -> Any:
    """Exponential linear unit (Clevert et al. 2016): ``x`` if ``x > 0`` else
    ``alpha * (exp(x) - 1)`` elementwise (no overflow from the untaken branch)."""
    x = _float_operand(x)
    neg = bnp.where(x > 0, _zeros(x), x)  # so exp never sees a large positive x
    return bnp.where(x > 0, x, alpha * bnp.expm1(neg))


def celu(x: Any, alpha: Any = 1.0) -> Any:
    """Continuously differentiable ELU (Barron 2017): ``x`` if ``x > 0`` else
    ``alpha * (exp(x / alpha) - 1)``; its derivative at 0 is 1."""
    x = _float_operand(x)
    neg = bnp.where(x > 0, _zeros(x), x)
    return bnp.where(x > 0, x, alpha * bnp.expm1(neg / alpha))


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def selu(x: Any) -> Any:
    """Scaled ELU (Klambauer et al. 2017): ``scale * elu(x, alpha)`` with ``alpha ~ 1.6733``,
    ``scale ~ 1.0507`` (the self-normalizing constants)."""
    return _SELU_SCALE * elu(x, _SELU_ALPHA)


def glu(x: Any, axis: int = -1) -> Any:
    """Gated linear unit (Dauphin et al. 2017): ``a * sigmoid(b)`` with ``x = concat(a, b)``
    along ``axis``.

    Args:
        x: float array whose ``axis`` has even size ``2n``.
        axis: the axis split in two halves.

    Returns:
        ``x``'s shape with ``axis`` of size ``n``.

    Raises:
        BluShapeError: ``axis`` has odd size.
    """
    x = _float_operand(x)
    (ax,) = _axes(axis, x.ndim, "glu")
    n = x.shape[ax]
    if n % 2:
        raise BluShapeError(
            with_user_line(f"nn.glu: axis {axis} of {x.shape} must have even size, got {n}")
        )
    a = lax.slice_in_dim(x, 0, n // 2, 1, ax)
    b = lax.slice_in_dim(x, n // 2, n, 1, ax)
    return a * sigmoid(b)


def hard_tanh(x: Any) -> Any:
    """``x`` clipped to ``[-1, 1]`` (derivative 1 on the closed interval, as JAX)."""
    x = _float_operand(x)
    one = bnp.ones_like(x)
    return bnp.where(x > 1, one, bnp.where(x < -1, -one, x))


@custom_jvp
def _relu6(x: Any) -> Any:
    return bnp.minimum(bnp.maximum(x, _zeros(x)), bnp.full_like(x, 6))


# derivative 0 at the corners 0 and 6 (JAX's convention), so hard_sigmoid is 0 there too
_relu6.defjvps(lambda t, y, x: bnp.where((x > 0) & (x < 6), t, _zeros(t)))


def relu6(x: Any) -> Any:
    """``min(max(x, 0), 6)`` elementwise; derivative 1 on ``(0, 6)``, 0 elsewhere (incl. the
    corners)."""
    return _relu6(_float_operand(x))


def hard_sigmoid(x: Any) -> Any:
    """``relu6(x + 3) / 6``: a piecewise-linear sigmoid."""
    return relu6(_float_operand(x) + 3.0) / 6.0


def hard_silu(x: Any) -> Any:
    """``x * hard_sigmoid(x)`` (hard swish, Howard et al. 2019)."""
    x = _float_operand(x)
    return x * hard_sigmoid(x)


hard_swish = hard_silu


def leaky_relu(x: Any, negative_slope: Any = 1e-2) -> Any:
    """``x`` if ``x >= 0`` else ``negative_slope * x`` (derivative 1 at 0, as JAX)."""
    x = _float_operand(x)
    return bnp.where(x >= 0, x, negative_slope * x)


def mish(x: Any) -> Any:
    """``x * tanh(softplus(x))`` (Misra 2019), stable for large ``|x|``."""
    x = _float_operand(x)
    return x * bnp.tanh(softplus(x))


def squareplus(x: Any, b: Any = 4) -> Any:
    """``(x + sqrt(x**2 + b)) / 2`` (So 2021), a smooth relu; ``b >= 0`` sets the curvature.

    For ``x < 0`` it is computed as ``b / (2 (sqrt(x**2 + b) - x))``, which does not cancel
    (``squareplus(-1e4)`` is ``1e-4`` in float32, not 0), and ``sqrt(x**2 + b)`` as
    ``hypot(x, sqrt(b))``, which does not overflow (``squareplus(1e30)`` is ``1e30`` in
    float32, not inf, with derivative 1).
    """
    x = _float_operand(x)
    b = bnp.asarray(b, dtype=x.dtype)
    r = bnp.hypot(x, bnp.sqrt(b))
    pos = 0.5 * x + 0.5 * r  # halves first: x + r overflows near the largest float
    den = bnp.where(x < 0, r - x, bnp.ones_like(x))  # r - x = r + |x| > 0; 1 keeps 0/0 out
    neg = b / (2 * den)
    return bnp.where(x < 0, neg, pos)


def standardize(
    x: Any,
    axis: int | tuple[int, ...] | None = -1,
    mean: Any = None,
    variance: Any = None,
    epsilon: float = 1e-5,
    where: Any = None,
    *,
    algorithm: str = "fast",
) -> Any:
    """``(x - mean) / sqrt(variance + epsilon)`` over ``axis`` (``jax.nn.standardize``).

    Args:
        x: float array.
        axis: the axis or axes the statistics are taken over (None: all).
        mean: the mean to use, broadcastable to ``x`` (computed over ``axis`` if None).
        variance: the variance to use (computed over ``axis``, biased, if None).
        epsilon: added to the variance.
        where: a boolean mask broadcastable to ``x``: only those elements enter the statistics.
        algorithm: how a variance not given is computed, JAX's names: ``"fast"`` (default)
            ``mean(x^2) - mean^2`` clipped at 0, ``"stable"`` ``mean((x - mean)^2)``. They
            differ only where ``mean`` is given (then ``"fast"`` is JAX's ``mean(x^2)`` less
            that mean squared); with ``mean`` None both are computed as ``"stable"`` (the
            same value, without the cancellation of ``E[x^2] - E[x]^2``).

    Returns:
        An array of ``x``'s shape and dtype.

    Raises:
        BluValueError: an ``algorithm`` other than ``"fast"`` and ``"stable"``.
    """
    if algorithm not in ("fast", "stable"):
        raise BluValueError(
            with_user_line(
                f"nn.standardize: algorithm must be 'fast' or 'stable', got {algorithm!r}"
            )
        )
    x = _float_operand(x)
    axes = _axes(axis, x.ndim, "standardize")
    fast_given_mean = algorithm == "fast" and mean is not None
    if mean is None:
        mean = bnp.mean(x, axis=axes, keepdims=True, where=where)
    if variance is None and fast_given_mean:
        # JAX's "fast" second moment about the given mean, clipped as JAX's
        mean_sq = bnp.mean(bnp.square(x), axis=axes, keepdims=True, where=where)
        variance = bnp.maximum(mean_sq - bnp.square(mean), 0)
    elif variance is None:
        # mean of squared deviations: no cancellation as in E[x^2] - E[x]^2
        variance = bnp.mean(bnp.square(x - mean), axis=axes, keepdims=True, where=where)
    else:  # a Python scalar takes x's dtype (else its sqrt would be the default float32's)
        variance = bnp.asarray(variance, dtype=bnp.result_type(x, variance))
    return (x - mean) / bnp.sqrt(variance + epsilon)
